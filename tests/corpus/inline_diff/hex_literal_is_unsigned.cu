// what: a hex literal that does not fit int is unsigned int: + 1 wraps to 0
// verdict: value 0
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    return 0xFFFFFFFF + 1;
}
