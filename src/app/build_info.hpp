// What this binary was built with and runs on, printed by `zerosync info`.
#pragma once
#include <ostream>

namespace zs {

void print_build_info(std::ostream& os);

}  // namespace zs
