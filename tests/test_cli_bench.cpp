// quanttool bench's argument checks: a column the table does not have is one line, exit 2,
// before anything is measured.
#include <string>

#include "tests/support.h"

namespace {

int bench(const std::string& args, std::string* out) {
  return qt::test::run_cmd(qt::test::quanttool_bin() + " bench " + args, out);
}

size_t lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(CliBench, UnknownColumnsAreOneLineExit2) {
  std::string out;
  EXPECT_EQ(bench("--gemv --gemv-columns affine4-g48", &out), 2) << out;
  EXPECT_EQ(lines(out), 1u) << out;
  EXPECT_NE(out.find("--gemv-columns: 'affine4-g48' is not one of"), std::string::npos) << out;
  EXPECT_EQ(bench("--kernel --kernel-columns w9a9", &out), 2) << out;
  EXPECT_EQ(lines(out), 1u) << out;
  EXPECT_NE(out.find("--kernel-columns: 'w9a9'"), std::string::npos) << out;
}

}  // namespace
