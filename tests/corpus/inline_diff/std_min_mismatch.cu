// what: std::min deduces one type: long and int do not
// verdict: error no instance of overloaded function "std::min" matches the argument list
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int64_t a = x.size(0);
    return std::min(a, 5);
}
