// SPDX-License-Identifier: Apache-2.0
// Replays fuzz inputs through a target's entry function without libFuzzer: the ctest
// fuzz_replay_<target> (fuzz/CMakeLists.txt) runs every file of the target's seed corpus and
// regression directories, so an input that once crashed the target fails the suite when the
// crash comes back (an abort, an uncaught exception, a failed FUZZ_CHECK; memory errors too
// when the suite is built with SLUICE_SANITIZE=address,undefined).
//
// Usage: fuzz_replay_<target> DIR_OR_FILE...  Files in a directory are replayed in name order;
// `*.md` files (the regression notes) and dot files are skipped. A missing path, or no input
// at all, is an error (exit 2).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

namespace {

bool replayable(const std::filesystem::path& p) {
  const auto name = p.filename().string();
  return !name.empty() && name.front() != '.' && p.extension() != ".md";
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      std::vector<std::filesystem::path> found;
      for (const auto& e : std::filesystem::directory_iterator(arg)) {
        if (e.is_regular_file() && replayable(e.path())) found.push_back(e.path());
      }
      std::sort(found.begin(), found.end());
      files.insert(files.end(), found.begin(), found.end());
    } else if (std::filesystem::is_regular_file(arg, ec)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "replay: %s: no such file or directory\n", argv[i]);
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "replay: no input to replay\n");
    return 2;
  }
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    const std::vector<char> bytes{std::istreambuf_iterator<char>(in),
                                  std::istreambuf_iterator<char>()};
    if (!in.eof() && in.fail()) {
      std::fprintf(stderr, "replay: %s: cannot read\n", f.c_str());
      return 2;
    }
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", f.c_str(), bytes.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::fprintf(stderr, "replay: %zu inputs, no failure\n", files.size());
  return 0;
}
