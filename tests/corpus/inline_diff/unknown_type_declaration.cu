// what: a declaration of a type the interpreter does not model
// verdict: refused host variable of type Widget
// native: 4
#include <torch/extension.h>
struct Widget { int v = 4; };
int64_t f(torch::Tensor x) {
    Widget w;
    return w.v;
}
