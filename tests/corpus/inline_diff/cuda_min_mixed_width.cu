// what: CUDA's host min has an overload per width: long and int match two
// verdict: error more than one instance of overloaded function "min" matches the argument list
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int64_t a = x.size(0);
    int b = 2;
    return min(a, b);
}
