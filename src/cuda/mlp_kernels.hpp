// The MLP step's small kernels (mlp_kernels.cu); cuBLAS does the matrix products (cuda_mlp.cpp). Every
// matrix is column-major with one column per sample, as train::Mlp's activations are. Each launcher
// returns the launch's status.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace pstwin::cuda {

// out[r, j] += bias[r], then max(0, .) where `relu`: a layer's output (rows x batch).
cudaError_t launch_bias_relu(float* out, const float* bias, std::size_t rows, std::size_t batch, bool relu,
                             cudaStream_t stream);

// Per sample j of logits (classes x batch): loss[j] = log_sum_exp(z) - z[y[j]] and
// delta[:, j] = (softmax(z) - one_hot(y[j])) * scale, summed in class order as the CPU does.
cudaError_t launch_softmax_xent(const float* logits, const std::uint8_t* labels, std::size_t classes,
                                std::size_t batch, float scale, float* delta, float* loss,
                                cudaStream_t stream);

// out[r] = sum over j of err[r, j], column after column (the CPU's order): a bias gradient.
cudaError_t launch_row_sums(const float* err, std::size_t rows, std::size_t batch, float* out,
                            cudaStream_t stream);

// below[i] = 0 where input[i] <= 0: the error kept only where the layer's ReLU was active.
cudaError_t launch_relu_mask(float* below, const float* input, std::size_t n, cudaStream_t stream);

}  // namespace pstwin::cuda
