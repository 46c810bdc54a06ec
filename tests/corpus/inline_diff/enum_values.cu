// what: enumerators count up from the last value
// verdict: value 54
#include <torch/extension.h>
enum Mode { A = 3, B, C };
int64_t f(torch::Tensor x) {
    return C * 10 + B;
}
