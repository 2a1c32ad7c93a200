// torchrun for one machine: runs a program as the ranks of a data-parallel group.
//
//   launch --nproc 2 ./build/examples/lora_finetune --base ... --data ...
//
// Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, a fresh
// TG_DIST_INIT_FILE and NCCL_NVLS_ENABLE=0; the output is rank 0's (the others keep stderr).
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "examples/common/launcher.h"
#include "io/number.h"

int main(int argc, char** argv) {
  const std::string usage = "usage: launch --nproc N <program> [args...]\n";
  if (argc < 4 || std::string(argv[1]) != "--nproc") return std::fputs(usage.c_str(), stderr), 2;
  const std::optional<int> nproc = tg::io::parse_integer<int>(argv[2]);
  if (!nproc || *nproc < 1 || *nproc > examples::kMaxRanks) {
    std::fprintf(stderr, "launch: --nproc wants an integer in [1, %d], got '%s'\n%s", examples::kMaxRanks, argv[2],
                 usage.c_str());
    return 2;
  }
  try {
    return examples::launch_ranks(*nproc, argv[3], std::vector<std::string>(argv + 4, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "launch: %s\n", e.what());
    return 1;
  }
}
