// what: 010 is octal (8), 0b101 is 5
// verdict: value 29
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    return 010 + 0x10 + 0b101;
}
