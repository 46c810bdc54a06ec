// what: % is not defined on double
// verdict: error expression must have integral or unscoped enum type
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    double d = 5.5;
    return d % 2;
}
