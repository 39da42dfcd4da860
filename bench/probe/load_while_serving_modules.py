# Writes the CUDA source of a module for load_while_serving.cu: N __noinline__ device functions,
# a __device__ table of pointers to them (so that the link keeps them all), a global `table` and a
# kernel `target`.   python3 load_while_serving_modules.py 3000 > big.cu
import sys

n = int(sys.argv[1])
print("__device__ int table[256];")
for i in range(n):
    print(f"__device__ __noinline__ int h{i}(int x) {{ return x * {i+3} + table[{i%256}] ^ {i}; }}")
print("typedef int (*fn)(int);")
print("__device__ fn ptrs[] = {" + ",".join(f"h{i}" for i in range(n)) + "};")
print('extern "C" __global__ void target(int *p) { p[0] = ptrs[p[1] %% %d](p[2]); }' % n)
