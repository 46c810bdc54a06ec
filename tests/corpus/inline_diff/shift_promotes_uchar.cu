// what: unsigned char promotes to int before the shift
// verdict: value 800
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    unsigned char c = 200;
    return c << 2;
}
