// what: integer division truncates toward zero; % takes the dividend's sign
// verdict: value -31
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    return -7 / 2 * 10 + -7 % 2;
}
