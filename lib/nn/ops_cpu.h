/*
 * ops_cpu.h - internal: the CPU kernels shared between the files of the CPU backend
 * (ops_cpu.c builds the table; ops_cpu_conv.c and ops_cpu_train.c implement these).
 * Contracts are those of the matching slots in nn/ops.h.
 */
#ifndef DT_NN_OPS_CPU_H
#define DT_NN_OPS_CPU_H

#include "nn/ops.h"

void dt__nn_cpu_im2col(const dt_nn_win *g, const float *x, float *col);
void dt__nn_cpu_col2im(const dt_nn_win *g, const float *col, float *dx, bool acc);
void dt__nn_cpu_pool_fwd(dt_nn_pool kind, const dt_nn_win *g, const float *x, float *y,
                         int32_t *arg);
void dt__nn_cpu_pool_bwd(dt_nn_pool kind, const dt_nn_win *g, const float *dy, const int32_t *arg,
                         float *dx, bool acc);
void dt__nn_cpu_loss(dt_nn_loss_kind kind, bool from_logits, const float *pred,
                     const int32_t *labels, const float *values, size_t n, int cols, float scale,
                     float *dpred, double *loss_sum);
double dt__nn_cpu_regularize(const float *w, float *g, size_t n, float l1, float l2, float scale);
void dt__nn_cpu_sgd(float *w, const float *g, float *m, size_t n, float lr, float momentum,
                    bool nesterov);
void dt__nn_cpu_adam(float *w, const float *g, float *m, float *v, size_t n, float alpha, float b1,
                     float b2, float eps);
void dt__nn_cpu_rmsprop(float *w, const float *g, float *vel, float *mom, float *avg, size_t n,
                        float lr, float rho, float momentum, float eps);

#endif
