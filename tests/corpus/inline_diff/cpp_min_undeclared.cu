// what: g++ has no unqualified min (CUDA's headers give .cu files one)
// verdict: error was not declared in this scope
// file: cpp
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int a = 1, b = 2;
    return min(a, b);
}
