// What sits at a path, for the checks that keep zerosync from replacing or writing through
// something that is not a plain file of its own: outputs are written to `path.tmp` and renamed
// over `path`, or appended to, and doing either to a device node, a FIFO or a symbolic link
// destroys it or writes somewhere the user never named.
#pragma once
#include <string>

namespace zs {

// "a regular file", "a directory", "a symbolic link", "a FIFO (named pipe)", "a character
// device", "a block device", "a socket" or "a file of unknown type"; "" when nothing is there.
// A symbolic link is reported as one, not followed. Throws zs::Error naming the path when it
// cannot be inspected (e.g. a folder on the way is not searchable).
std::string file_kind(const std::string& path);

// Throws zs::Error unless `path` is absent or a regular file, and its folder exists: the message
// names `what` (e.g. "step --out"), the path and what is there.
void require_output_file(const std::string& path, const std::string& what);

// Throws zs::Error when `path` is missing or a directory. FIFOs and devices stay readable, so
// process substitution (`--config <(...)`) and /dev/stdin work.
void require_input_file(const std::string& path, const std::string& what);

}  // namespace zs
