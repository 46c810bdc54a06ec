// what: int64_t is long, 5LL is long long: two types
// verdict: error no instance of overloaded function "std::min" matches the argument list
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    return std::min(x.size(0), 5LL);
}
