#include "core/file_kind.hpp"

#include <filesystem>
#include <system_error>

#include "core/error.hpp"

namespace zs {

namespace fs = std::filesystem;

namespace {

std::string kind_of(fs::file_type t) {
  switch (t) {
    case fs::file_type::not_found: return "";
    case fs::file_type::regular: return "a regular file";
    case fs::file_type::directory: return "a directory";
    case fs::file_type::symlink: return "a symbolic link";
    case fs::file_type::fifo: return "a FIFO (named pipe)";
    case fs::file_type::character: return "a character device";
    case fs::file_type::block: return "a block device";
    case fs::file_type::socket: return "a socket";
    default: return "a file of unknown type";
  }
}

std::string folder_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? "." : parent.string();
}

}  // namespace

std::string file_kind(const std::string& path) {
  std::error_code ec;
  const fs::file_status s = fs::symlink_status(path, ec);
  if (ec && s.type() != fs::file_type::not_found)
    fail("cannot inspect '", path, "': ", ec.message());
  return kind_of(s.type());
}

void require_output_file(const std::string& path, const std::string& what) {
  require(!path.empty(), what, ": the path is empty; expected a file name");
  const std::string kind = file_kind(path);
  require(kind.empty() || kind == "a regular file", what, ": '", path, "' is ", kind,
          "; expected a regular file or a new path (zerosync replaces its outputs, and refuses to "
          "replace or write through anything else)");
  const std::string folder = folder_of(path);
  std::error_code ec;
  const fs::file_status s = fs::status(folder, ec);  // a link to a folder is a folder here
  require(s.type() != fs::file_type::not_found, what, ": cannot open '", path, "' for writing: its folder '", folder,
          "' does not exist; expected an existing folder");
  require(!ec, what, ": cannot inspect the folder '", folder, "' of '", path, "': ", ec.message());
  require(s.type() == fs::file_type::directory, what, ": the folder '", folder, "' of '", path,
          "' is ", kind_of(s.type()), "; expected a directory");
}

void require_input_file(const std::string& path, const std::string& what) {
  require(!path.empty(), what, ": the path is empty; expected a file name");
  std::error_code ec;
  const fs::file_status s = fs::status(path, ec);  // inputs may be links: they are only read
  require(s.type() != fs::file_type::not_found, what, ": cannot open '", path,
          "': it does not exist; expected a readable file");
  require(!ec, what, ": cannot inspect '", path, "': ", ec.message());
  require(s.type() != fs::file_type::directory, what, ": '", path,
          "' is a directory; expected a file");
}

}  // namespace zs
