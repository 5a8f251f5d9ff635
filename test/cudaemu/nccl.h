/*
 * nccl.h - the host emulator's NCCL: communicators of one process (ncclCommInitRankConfig in a
 * group under one id, as ncclCommInitAll), all-reduce (float sum) and broadcast. A collective
 * completes when the last member issues it: that member sums the members' buffers in member
 * order (float32, the same bits for every member) and writes every member's result; the others
 * see ncclInProgress from ncclCommGetAsyncError until then, as non-blocking communicators do, so
 * nccl.cu's polling, deadlines and abort run as on a GPU. No transport, no topology: NCCL's ring
 * order is not reproduced (a GPU's sums may differ by ulps from these).
 */
#ifndef DT_CUDAEMU_NCCL_H
#define DT_CUDAEMU_NCCL_H

#include "cuda_runtime.h"

typedef enum {
    ncclSuccess = 0,
    ncclUnhandledCudaError = 1,
    ncclSystemError = 2,
    ncclInternalError = 3,
    ncclInvalidArgument = 4,
    ncclInvalidUsage = 5,
    ncclRemoteError = 6,
    ncclInProgress = 7,
} ncclResult_t;
typedef enum {
    ncclInt8 = 0,
    ncclChar = 0,
    ncclUint8 = 1,
    ncclInt32 = 2,
    ncclInt = 2,
    ncclUint32 = 3,
    ncclInt64 = 4,
    ncclUint64 = 5,
    ncclFloat16 = 6,
    ncclHalf = 6,
    ncclFloat32 = 7,
    ncclFloat = 7,
    ncclFloat64 = 8,
    ncclDouble = 8,
} ncclDataType_t;
typedef enum { ncclSum = 0, ncclProd = 1, ncclMax = 2, ncclMin = 3, ncclAvg = 4 } ncclRedOp_t;
typedef struct {
    char internal[128];
} ncclUniqueId;
struct ncclComm;
typedef ncclComm *ncclComm_t;
typedef struct {
    int blocking;
} ncclConfig_t;
#define NCCL_CONFIG_INITIALIZER                                                                    \
    {                                                                                              \
        1                                                                                          \
    }

const char *ncclGetErrorString(ncclResult_t r);
const char *ncclGetLastError(ncclComm_t comm);
ncclResult_t ncclGetUniqueId(ncclUniqueId *id);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommInitAll(ncclComm_t *comms, int n, const int *devs);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *state);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclAllReduce(const void *send, void *recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclReduceScatter(const void *send, void *recv, size_t recvcount, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclAllGather(const void *send, void *recv, size_t sendcount, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t s);
ncclResult_t ncclBroadcast(const void *send, void *recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t s);

#endif
