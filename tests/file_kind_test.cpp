// Outputs are replaced (written to path.tmp, renamed over path) or appended to; doing that to a
// device node, a FIFO, a socket, a directory or a symbolic link destroys it or writes through it.
// These tests build each kind in a temporary folder (never a real device node) and check that
// every writer refuses it, naming the path and what is there, and leaves it as it was.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/file_kind.hpp"
#include "core/safetensors.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
namespace st = zs::safetensors;

class FileKind : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = zs::test::temp_path("dir");
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  void TearDown() override { fs::remove_all(dir); }
  std::string dir;
};

st::File small_file() {
  st::File f;
  f.tensors["x"] = st::Tensor::from<float>({2}, {1.f, 2.f});
  return f;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_F(FileKind, NamesEveryKindAndDoesNotFollowLinks) {
  EXPECT_EQ(zs::file_kind(dir + "/none"), "");
  std::ofstream(dir + "/file") << "x";
  EXPECT_EQ(zs::file_kind(dir + "/file"), "a regular file");
  EXPECT_EQ(zs::file_kind(dir), "a directory");
  fs::create_symlink(dir + "/file", dir + "/link");
  EXPECT_EQ(zs::file_kind(dir + "/link"), "a symbolic link");
  fs::create_symlink(dir + "/none", dir + "/dangling");
  EXPECT_EQ(zs::file_kind(dir + "/dangling"), "a symbolic link");
  ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0600), 0);
  EXPECT_EQ(zs::file_kind(dir + "/fifo"), "a FIFO (named pipe)");
  // A socket's path must fit in sockaddr_un, which a long temporary folder may not.
  const std::string sock = dir + "/s";
  if (sock.size() < sizeof(sockaddr_un::sun_path)) {
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", sock.c_str());
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(zs::file_kind(sock), "a socket");
    close(fd);
  }
  // A real device node is only looked at, never written.
  EXPECT_EQ(zs::file_kind("/dev/null"), "a character device");
}

TEST_F(FileKind, SafetensorsWriteRefusesAFifoALinkAndADirectory) {
  ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0600), 0);
  std::ofstream(dir + "/target") << "precious";
  fs::create_symlink(dir + "/target", dir + "/link");
  fs::create_directories(dir + "/folder");
  const struct {
    std::string path, kind;
  } cases[] = {{dir + "/fifo", "a FIFO (named pipe)"},
               {dir + "/link", "a symbolic link"},
               {dir + "/folder", "a directory"}};
  for (const auto& c : cases) {
    const std::string e = zs::test::error_of([&] { st::write(c.path, small_file()); });
    EXPECT_NE(e.find("'" + c.path + "' is " + c.kind + "; expected a regular file or a new path"), std::string::npos)
        << e;
  }
  EXPECT_EQ(zs::file_kind(dir + "/fifo"), "a FIFO (named pipe)");
  EXPECT_EQ(zs::file_kind(dir + "/link"), "a symbolic link");
  EXPECT_EQ(slurp(dir + "/target"), "precious");
}

TEST_F(FileKind, SafetensorsWriteDoesNotWriteThroughALinkAtItsTemporaryName) {
  std::ofstream(dir + "/target") << "precious";
  fs::create_symlink(dir + "/target", dir + "/out.safetensors.tmp");
  const std::string e = zs::test::error_of([&] { st::write(dir + "/out.safetensors", small_file()); });
  EXPECT_NE(e.find("'" + dir + "/out.safetensors.tmp' is a symbolic link"), std::string::npos) << e;
  EXPECT_EQ(slurp(dir + "/target"), "precious");
}

TEST_F(FileKind, SafetensorsWriteReplacesARegularFileAndNamesAMissingFolder) {
  std::ofstream(dir + "/out") << "old";
  st::write(dir + "/out", small_file());
  EXPECT_EQ(st::read(dir + "/out").f32("x", {2}), (std::vector<float>{1.f, 2.f}));
  std::ofstream(dir + "/file") << "x";
  const std::string e = zs::test::error_of([&] { st::write(dir + "/file/out", small_file()); });
  EXPECT_NE(e.find("the folder '" + dir + "/file' of '" + dir + "/file/out' is a regular file; expected a directory"),
            std::string::npos)
      << e;
  const std::string m = zs::test::error_of([&] { st::write(dir + "/no/out", small_file()); });
  EXPECT_NE(m.find("cannot open '" + dir + "/no/out' for writing: its folder '" + dir + "/no' does not exist"),
            std::string::npos)
      << m;
}

TEST_F(FileKind, ReadingADirectoryIsAClearError) {
  const std::string e = zs::test::error_of([&] { st::read(dir); });
  EXPECT_NE(e.find("'" + dir + "' is a directory; expected a safetensors file"), std::string::npos) << e;
  EXPECT_NE(zs::test::error_of([&] { zs::require_input_file(dir, "--config"); })
                .find("--config: '" + dir + "' is a directory; expected a file"),
            std::string::npos);
  EXPECT_NE(zs::test::error_of([&] { zs::require_input_file(dir + "/none", "--config"); }).find("does not exist"),
            std::string::npos);
}

}  // namespace
