// what: structs are device-side only
// verdict: refused host variable of type P
// native: 3
#include <torch/extension.h>
struct P { int a; int b; };
int64_t f(torch::Tensor x) {
    P p{1, 2};
    return p.a + p.b;
}
