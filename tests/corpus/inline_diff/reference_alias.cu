// what: a reference aliases a; the interpreter would copy
// verdict: refused reference r to the variable a
// native: 2
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    int a = 1;
    int& r = a;
    r = 2;
    return a;
}
