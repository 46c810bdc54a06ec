// what: unsigned char wraps modulo 256
// verdict: value 4
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    unsigned char c = 250;
    c += 10;
    return c;
}
