// Helpers the test files share: the message of the tg::Error a call raises, an assertion on its
// parts, and a fresh directory per test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <system_error>

#include "core/error.h"

namespace tg::test {

// The message of the tg::Error `fn` raises; "" when it raises none.
inline std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// `stmt` raises a tg::Error whose message contains every one of the strings that follow.
#define EXPECT_ERROR_HAS(stmt, ...)                                                          \
  do {                                                                                       \
    const std::string tg_msg = ::tg::test::error_of([&] { stmt; });                          \
    EXPECT_FALSE(tg_msg.empty()) << #stmt " raised no tg::Error";                            \
    for (const char* tg_part : {__VA_ARGS__})                                                \
      EXPECT_NE(tg_msg.find(tg_part), std::string::npos) << "message: " << tg_msg            \
                                                         << "\nmissing: " << tg_part;       \
  } while (0)

// A fresh, empty directory named after the running test, removed with everything in it (also
// after a test made it read-only).
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string(info->test_suite_name()) + "_" + info->name();
    for (char& c : name)
      if (c == '/') c = '_';  // parameterised tests: "Suite/Param"
    path_ = std::filesystem::temp_directory_path() / ("tg_" + name + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace tg::test
