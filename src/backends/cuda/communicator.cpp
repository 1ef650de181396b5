// The CUDA backend's all-reduce: NCCL. ncclAllReduce with ncclAvg, in place, on the step's
// stream, so it orders after the backward kernels and before the norms without the host
// waiting, and a CUDA graph captured around the step records it as nodes of its own.
// The communicator is blocking: its set-up waits for every rank (the ProcessGroup's watchdog
// bounds that wait), and it reports a peer lost over the network through check().
#include "backends/communicator.hpp"

#include <nccl.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/check.hpp"

namespace zs {

namespace {

void nccl_check(ncclResult_t r, const char* call) {
  if (r == ncclSuccess) return;
  const std::string message = str(call, " failed: ", ncclGetErrorString(r));
  // A remote or system error is a lost peer (or its network); the others are this rank's own.
  if (r == ncclRemoteError || r == ncclSystemError) throw PeerFailure(message);
  fail(message);
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ProcessGroup& group, Stream&) : Communicator(group.rank(), group.size()) {
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    std::vector<std::uint8_t> bytes;
    if (rank() == 0) {
      nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      bytes.assign(reinterpret_cast<const std::uint8_t*>(&id), reinterpret_cast<const std::uint8_t*>(&id) + sizeof id);
    }
    bytes = group.broadcast(bytes, "sharing NCCL's unique id");
    require(bytes.size() == sizeof id, "NCCL's unique id arrived as ", bytes.size(), " bytes; expected ", sizeof id);
    std::memcpy(&id, bytes.data(), sizeof id);
    nccl_check(ncclCommInitRank(&comm_, size(), id, rank()), "ncclCommInitRank");
  }

  ~NcclCommunicator() override {
    if (!comm_) return;
    // A communicator that saw a peer fail may never finish its work: abort it rather than wait.
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async == ncclSuccess) ncclCommDestroy(comm_);
    else ncclCommAbort(comm_);
  }

  void enqueue_mean(Stream& stream, const DeviceFloats& data) override {
    nccl_check(ncclAllReduce(data.data(), data.data(), data.extent(0), ncclFloat, ncclAvg, comm_,
                             static_cast<cudaStream_t>(stream.native())),
               "ncclAllReduce");
  }

  void check() override {
    ncclResult_t async = ncclSuccess;
    nccl_check(ncclCommGetAsyncError(comm_, &async), "ncclCommGetAsyncError");
    nccl_check(async, "the gradient all-reduce (NCCL, asynchronous error)");
  }

 private:
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_communicator(ProcessGroup& group, Stream& stream) {
  return std::make_unique<NcclCommunicator>(group, stream);
}

}  // namespace zs
