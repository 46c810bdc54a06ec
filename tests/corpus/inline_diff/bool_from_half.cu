// what: 0.5 is true: a double converts to bool by comparing with zero, not by truncating
// verdict: value true
#include <torch/extension.h>
bool f(torch::Tensor x) {
    double d = 0.5;
    bool b = d;
    return b;
}
