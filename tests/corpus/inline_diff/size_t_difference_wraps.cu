// what: size_t subtraction wraps; the cast back to int64_t gives -2
// verdict: value -2
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    size_t a = 3, b = 5;
    return (int64_t)(a - b);
}
