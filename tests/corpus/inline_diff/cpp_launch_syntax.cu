// what: g++ builds cpp_sources: a <<<>>> launch there does not compile
// verdict: error expected primary-expression before ‘<’ token
// file: cpp
#include <torch/extension.h>
void k(int);
int64_t f(torch::Tensor x) {
    k<<<1, 32>>>(3);
    return 0;
}
