// The one seed policy of every command and config: a seed is a decimal integer in
// [0, 2^64 − 1]. A sign, a fraction, an exponent or a value past 2^64 − 1 is an error, never
// wrapped or rounded, so `--seed -1` cannot quietly become 18446744073709551615.
#pragma once
#include <cstdint>
#include <string>

namespace zs {

// `text` as a seed; otherwise throws zs::Error "<what> = <text> is invalid; expected an integer
// in [0, 18446744073709551615]". `what` names the source ("--seed", "config: seed").
std::uint64_t parse_seed(const std::string& text, const std::string& what);

}  // namespace zs
