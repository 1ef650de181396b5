#include "app/explain.hpp"

#include <filesystem>
#include <ios>
#include <new>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace zs {

void rethrow_explained(const std::string& doing) {
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const std::filesystem::filesystem_error& e) {
    std::string where;
    if (!e.path1().empty()) where += " ('" + e.path1().string() + "'";
    if (!e.path2().empty()) where += ", '" + e.path2().string() + "'";
    if (!where.empty()) where += ")";
    fail(doing, ": ", e.code().message(), where);
  } catch (const std::ios_base::failure& e) {
    fail(doing, ": reading or writing failed: ", e.what());
  } catch (const std::bad_alloc&) {
    fail(doing, ": out of memory: a buffer it needs could not be allocated; expected sizes (config widths, batch "
         "size, replay capacity) that fit in this machine's memory");
  } catch (const std::length_error& e) {
    fail(doing, ": a buffer it needs is larger than any allocation can be (", e.what(),
         "); expected smaller sizes in the config or the input");
  } catch (const nlohmann::json::exception& e) {
    fail(doing, ": ", e.what());
  } catch (const std::exception& e) {
    fail(doing, ": ", e.what());
  } catch (...) {
    fail(doing, ": failed with an exception of unknown type");
  }
}

}  // namespace zs
