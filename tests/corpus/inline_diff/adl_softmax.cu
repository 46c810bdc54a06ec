// what: family 5: an unqualified ATen call, found by argument-dependent lookup
// verdict: refused argument-dependent lookup
// headers: torch
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    return softmax(x, 1).size(0);
}
