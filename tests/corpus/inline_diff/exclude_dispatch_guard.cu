// what: family 5: stepping around the Python dispatch keys
// verdict: refused c10::impl::ExcludeDispatchKeyGuard
// headers: torch
#include <torch/extension.h>
int64_t f(torch::Tensor x) {
    c10::impl::ExcludeDispatchKeyGuard guard(c10::DispatchKeySet(c10::DispatchKey::Python));
    return x.size(0);
}
