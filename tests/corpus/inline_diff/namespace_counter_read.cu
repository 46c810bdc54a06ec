// what: even read, a non-const global
// verdict: refused namespace-scope variable counter
// native: 3
#include <torch/extension.h>
int counter = 3;
int64_t f(torch::Tensor x) {
    return counter;
}
