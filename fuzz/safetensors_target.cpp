#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/safetensors.hpp"
#include "targets.hpp"

namespace zs::fuzz {

namespace st = zs::safetensors;

int safetensors(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::uint8_t> image(data, data + size);
  st::File f;
  try {
    f = st::parse(image, "fuzz");
  } catch (const Error&) {
    return 0;
  }
  // Every accepted tensor holds exactly its shape's bytes, and the file survives a rewrite.
  for (const auto& [name, t] : f.tensors) {
    try {
      if (static_cast<std::uint64_t>(t.numel()) * st::dtype_size(t.dtype) != t.bytes.size())
        finding("safetensors", ("tensor '" + name + "' holds other than numel x dtype size bytes").c_str());
      if (t.dtype == st::DType::F32) (void)t.as<float>();
      if (t.dtype == st::DType::I64) (void)t.as<std::int64_t>();
    } catch (const Error& e) {
      finding("safetensors", e.what());
    }
  }
  st::File again;
  try {
    again = st::parse(st::serialize(f), "fuzz (rewritten)");
  } catch (const Error& e) {
    finding("safetensors", (std::string("an accepted file does not survive serialize + parse: ") + e.what()).c_str());
  }
  if (again.metadata != f.metadata) finding("safetensors", "the rewrite changed the metadata");
  if (again.tensors.size() != f.tensors.size()) finding("safetensors", "the rewrite changed the tensor count");
  for (const auto& [name, t] : f.tensors) {
    const auto it = again.tensors.find(name);
    if (it == again.tensors.end() || it->second.dtype != t.dtype || it->second.shape != t.shape ||
        it->second.bytes != t.bytes)
      finding("safetensors", ("the rewrite changed tensor '" + name + "'").c_str());
  }
  return 0;
}

}  // namespace zs::fuzz
