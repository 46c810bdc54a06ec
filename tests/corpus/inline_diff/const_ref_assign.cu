// what: a const reference is not assigned; the interpreter refuses the alias before that
// verdict: error expression must be a modifiable lvalue
// fast: refused reference r
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int c = 1;
    const int& r = c;
    r = 2;
    return c;
}
