// The NCCL backend of Communicator (built only with NCCL: distributed/init.h is the way in).
#pragma once

#include <memory>
#include <string>

#include "distributed/communicator.h"

namespace tg::distributed {

inline constexpr size_t kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
// A fresh NCCL id (rank 0 makes it, the others receive it).
std::string nccl_unique_id();
// Joins the group of `world_size` ranks that share `id`, on CUDA device `device`: blocks until
// every rank has joined.
std::unique_ptr<Communicator> make_nccl_communicator(const std::string& id, int rank, int world_size, int device);

}  // namespace tg::distributed
