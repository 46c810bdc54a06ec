// what: the return value converts to int
// verdict: value -1294967296
#include <torch/extension.h>
int f(torch::Tensor x) {
    return 3000000000LL;
}
