// what: a global counter: state across calls
// verdict: refused namespace-scope variable counter
// native: 1
#include <torch/extension.h>
int counter = 0;
int64_t f(torch::Tensor x) {
    counter += 1;
    return counter;
}
