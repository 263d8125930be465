/* A CUDA simulator for the host: compiles a flowc .cu file with a host C++17 compiler
 * (g++ -x c++ -DFC_CUDA_SIM -include cuda/sim.h) and runs its kernels on the CPU, so that the
 * CUDA backend's kernels and its generated host code are checked against numpy on machines
 * without a GPU.
 *
 * What it models: a grid runs block after block; the threads of a block run as fibers on the
 * calling thread, switched at __syncthreads (so shared memory, declared __shared__, is one
 * static per kernel, which is right while one block runs at a time) and at warp shuffles (an
 * exchange through the block: every thread of the block must call them alike, as flowc's
 * kernels do). Streams run their work at once, in order; a stream being captured records it
 * into the graph instead, and a graph launch replays the record. Device memory is host memory.
 * What it does not model: timing, concurrency between blocks or streams, warp divergence,
 * memory fences, tensor cores. A kernel correct here can still race on a GPU: the CUDA suite
 * and compute-sanitizer on a GPU machine decide that.
 */
#ifndef FC_CUDA_SIM_H
#define FC_CUDA_SIM_H

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>
#include <ucontext.h>

#define __host__
#define __device__
#define __global__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __restrict__

struct dim3 {
    unsigned x, y, z;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};

typedef int cudaError_t;
enum {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorNoDevice = 100,
    cudaErrorStreamCaptureInvalidated = 901,
};
enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};
enum cudaStreamCaptureMode { cudaStreamCaptureModeGlobal = 0, cudaStreamCaptureModeThreadLocal = 1, cudaStreamCaptureModeRelaxed = 2 };
enum cudaDeviceAttr { cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76 };
#define cudaStreamNonBlocking 0x01

struct fc_sim_graph {
    std::vector<std::function<void()>> work;
};
struct CUstream_st {
    fc_sim_graph *capture = nullptr;
};
typedef CUstream_st *cudaStream_t;
typedef fc_sim_graph *cudaGraph_t;
typedef fc_sim_graph *cudaGraphExec_t;
struct cudaFuncAttributes {
    int numRegs;
};

namespace fc_sim {
struct Block {
    dim3 block_idx, thread_idx, block_dim, grid_dim;
    int nthreads = 1, cur = 0;
    std::vector<ucontext_t> fibers;
    std::vector<char> done;
    std::vector<unsigned char> exchange;
    ucontext_t sched;
    const std::function<void()> *body = nullptr;
};
inline Block &cur() {
    static thread_local Block b;
    return b;
}
inline std::vector<char> &stacks(size_t bytes) {
    static thread_local std::vector<char> s;
    if (s.size() < bytes) s.resize(bytes);
    return s;
}
constexpr size_t STACK = 64 * 1024;

inline void entry() {
    Block &b = cur();
    (*b.body)();
    b.done[b.cur] = 1;
}

inline void set_thread(Block &b, int t) {
    b.cur = t;
    b.thread_idx = dim3(t % b.block_dim.x, t / b.block_dim.x % b.block_dim.y, t / (b.block_dim.x * b.block_dim.y));
}

inline void run_block(Block &b, const std::function<void()> &body) {
    if (b.nthreads == 1) {
        set_thread(b, 0);
        body();
        return;
    }
    std::vector<char> &stack = stacks(STACK * (size_t)b.nthreads);
    b.fibers.resize(b.nthreads);
    b.done.assign(b.nthreads, 0);
    b.exchange.assign((size_t)b.nthreads * 16, 0);
    b.body = &body;
    for (int t = 0; t < b.nthreads; ++t) {
        getcontext(&b.fibers[t]);
        b.fibers[t].uc_stack.ss_sp = stack.data() + STACK * (size_t)t;
        b.fibers[t].uc_stack.ss_size = STACK;
        b.fibers[t].uc_link = &b.sched;
        makecontext(&b.fibers[t], entry, 0);
    }
    int alive = b.nthreads;
    while (alive > 0) { /* one pass: every live thread runs to its next barrier or its end */
        for (int t = 0; t < b.nthreads; ++t) {
            if (b.done[t]) continue;
            set_thread(b, t);
            swapcontext(&b.sched, &b.fibers[t]);
            if (b.done[t]) --alive;
        }
    }
}

inline void run_grid(dim3 grid, dim3 block, const std::function<void()> &body) {
    Block &b = cur();
    b.grid_dim = grid;
    b.block_dim = block;
    b.nthreads = (int)(block.x * block.y * block.z);
    for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
            for (unsigned x = 0; x < grid.x; ++x) {
                b.block_idx = dim3(x, y, z);
                run_block(b, body);
            }
}

inline void enqueue(cudaStream_t s, std::function<void()> work) {
    if (s && s->capture)
        s->capture->work.push_back(std::move(work));
    else
        work();
}

template <class... P>
struct Launch {
    void (*kernel)(P...);
    dim3 grid, block;
    cudaStream_t stream;
    template <class... A>
    void operator()(A... args) const {
        void (*k)(P...) = kernel;
        dim3 g = grid, b = block;
        enqueue(stream, [=] { run_grid(g, b, [=] { k(args...); }); });
    }
};

template <class... P>
Launch<P...> launch(void (*kernel)(P...), dim3 grid, dim3 block, cudaStream_t stream) {
    return Launch<P...>{kernel, grid, block, stream};
}

inline int linear_thread() { return cur().cur; }

template <class T>
T exchange(T v, int (*partner)(int, int), int arg) {
    Block &b = cur();
    int me = b.cur;
    std::memcpy(&b.exchange[(size_t)me * 16], &v, sizeof v);
    swapcontext(&b.fibers[me], &b.sched);
    int p = partner(me, arg);
    T r;
    std::memcpy(&r, &b.exchange[(size_t)(p < 0 ? me : p) * 16], sizeof r);
    swapcontext(&b.fibers[me], &b.sched);
    return r;
}
inline int xor_partner(int me, int m) { return (me & ~31) | ((me & 31) ^ m); }
inline int down_partner(int me, int d) { return (me & 31) + d < 32 ? me + d : -1; }
}  // namespace fc_sim

#define blockIdx (fc_sim::cur().block_idx)
#define threadIdx (fc_sim::cur().thread_idx)
#define blockDim (fc_sim::cur().block_dim)
#define gridDim (fc_sim::cur().grid_dim)
#define FC_LAUNCH(kernel, grid, block, stream) fc_sim::launch(kernel, grid, block, stream)

inline void __syncthreads() {
    fc_sim::Block &b = fc_sim::cur();
    if (b.nthreads > 1) swapcontext(&b.fibers[b.cur], &b.sched);
}
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int m, int = 32) {
    return fc_sim::cur().nthreads > 1 ? fc_sim::exchange(v, fc_sim::xor_partner, m) : v;
}
template <class T>
inline T __shfl_down_sync(unsigned, T v, int d, int = 32) {
    return fc_sim::cur().nthreads > 1 ? fc_sim::exchange(v, fc_sim::down_partner, d) : v;
}
inline int atomicCAS(int *p, int expected, int desired) {
    int old = *p;
    if (old == expected) *p = desired;
    return old;
}
inline float atomicAdd(float *p, float v) {
    float old = *p;
    *p = old + v;
    return old;
}

inline cudaError_t cudaMalloc(void **p, size_t n) {
    *p = std::malloc(n ? n : 1);
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
inline cudaError_t cudaFree(void *p) {
    std::free(p);
    return cudaSuccess;
}
inline cudaError_t cudaMallocHost(void **p, size_t n) { return cudaMalloc(p, n); }
inline cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }
inline cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, cudaMemcpyKind, cudaStream_t s = 0) {
    fc_sim::enqueue(s, [=] { std::memcpy(dst, src, n); });
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void *dst, const void *src, size_t n, cudaMemcpyKind) {
    std::memcpy(dst, src, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void *dst, int v, size_t n, cudaStream_t s = 0) {
    fc_sim::enqueue(s, [=] { std::memset(dst, v, n); });
    return cudaSuccess;
}
inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
    *s = new CUstream_st();
    return cudaSuccess;
}
inline cudaError_t cudaStreamDestroy(cudaStream_t s) {
    delete s;
    return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode) {
    if (!s || s->capture) return cudaErrorInvalidValue;
    s->capture = new fc_sim_graph();
    return cudaSuccess;
}
inline cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    if (!s || !s->capture) return cudaErrorStreamCaptureInvalidated;
    *g = s->capture;
    s->capture = nullptr;
    return cudaSuccess;
}
inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long = 0) {
    *e = new fc_sim_graph(*g);
    return cudaSuccess;
}
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
    for (auto &w : e->work) fc_sim::enqueue(s, w);
    return cudaSuccess;
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    delete e;
    return cudaSuccess;
}
inline cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete g;
    return cudaSuccess;
}
inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
inline const char *cudaGetErrorString(cudaError_t e) {
    return e == cudaSuccess ? "no error" : e == cudaErrorMemoryAllocation ? "out of memory" : "simulated CUDA error";
}
inline cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int *d) {
    *d = 0;
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int) { return cudaSuccess; }
inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int) {
    *v = a == cudaDevAttrComputeCapabilityMajor ? 9 : 0;
    return cudaSuccess;
}
template <class F>
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, F) {
    a->numRegs = 0;
    return cudaSuccess;
}

#endif /* FC_CUDA_SIM_H */
