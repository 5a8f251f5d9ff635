/*
 * ops_cpu.h - internal: the CPU kernels shared between the files of the CPU backend
 * (ops_cpu.c builds the table; ops_cpu_conv.c, ops_cpu_train.c, ops_cpu_optim.c,
 * ops_cpu_image.c, ops_cpu_vision.c, ops_cpu_seq.c, ops_cpu_rnn.c and ops_cpu_rgemm.c
 * implement these).
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
void dt__nn_cpu_loss(const dt_nn_loss_p *lp, const float *pred, const int32_t *labels,
                     const float *values, const float *row_w, size_t n, int cols, float scale,
                     float *dpred, double *loss_sum);
void dt__nn_cpu_regularize_dev(const float *w, float *g, size_t n, float l1, float l2, float scale,
                               double *out);
void dt__nn_cpu_hits(dt_nn_hits_kind kind, const float *pred, const int32_t *labels,
                     const float *targets, size_t n, int cols, double *out);
void dt__nn_cpu_clip_norm(float *g, size_t n, size_t nseg, const size_t *off, const size_t *len,
                          float clipnorm, float global_clipnorm, double *ss);
void dt__nn_cpu_update(const dt_nn_update *u, float *w, const float *g, size_t n);
void dt__nn_cpu_img_flip(int n, int h, int w, int c, const int32_t *flags, const float *x, float *y,
                         bool acc);
void dt__nn_cpu_img_adjust(int n, int hw, int c, const float *f, const float *d, float lo, float hi,
                           const float *x, float *y);
void dt__nn_cpu_img_adjust_bwd(int n, int hw, int c, const float *f, const float *d, float lo,
                               float hi, const float *x, const float *dy, float *dx, bool acc);
void dt__nn_cpu_img_resize(const dt_nn_resize *g, const float *x, float *y);
void dt__nn_cpu_img_resize_bwd(const dt_nn_resize *g, const float *dy, float *dx, bool acc);
void dt__nn_cpu_img_transform(const dt_nn_transform *g, const float *t, const float *x, float *y);
void dt__nn_cpu_img_transform_bwd(const dt_nn_transform *g, const float *t, const float *dy,
                                  float *dx, bool acc);
void dt__nn_cpu_dw_fwd(const dt_nn_win *g, int mult, const float *x, const float *k, float *y);
void dt__nn_cpu_dw_bwd(const dt_nn_win *g, int mult, const float *x, const float *k,
                       const float *dy, float *dk, float *dx, bool acc);
void dt__nn_cpu_max_fwd(size_t n, int k, const float *const *xs, float *y, uint8_t *arg);
void dt__nn_cpu_max_bwd(size_t n, int i, const uint8_t *arg, const float *dy, float *dx, bool acc);
void dt__nn_cpu_embed_fwd(const float *ids, size_t n, const float *table, int rows, int dim,
                          float *y, float *mask, float *bad);
void dt__nn_cpu_embed_bwd(const float *ids, size_t n, const float *dy, int rows, int dim,
                          float *dtable);
void dt__nn_cpu_seq_mean(int n, int t, int c, const float *x, const float *mask, float *y);
void dt__nn_cpu_seq_mean_bwd(int n, int t, int c, const float *dy, const float *mask, float *dx,
                             bool acc);
void dt__nn_cpu_ln_fwd(const float *x, float *y, float *xhat, float *rstd, size_t rows, int cols,
                       const float *gamma, const float *beta, float eps);
void dt__nn_cpu_ln_bwd(const float *dy, const float *xhat, const float *rstd, size_t rows, int cols,
                       const float *gamma, float *dx, bool acc, float *dgamma, float *dbeta);
void dt__nn_cpu_attn_mask(float *s, const float *qm, const float *vm, const float *km, int n,
                          int heads, int tq, int tv, bool causal);
void dt__nn_cpu_rnn_fwd(const dt_nn_rnn_step *s);
void dt__nn_cpu_rnn_bwd(const dt_nn_rnn_step *s);
void dt__nn_cpu_rnn_pack(bool tb, int k, int n, const float *b, int ldb, float *p);
void dt__nn_cpu_rnn_gemm(bool ta, int m, int n, int k, const float *a, int lda, const float *b,
                         int ldb, float beta, float *c, int ldc);
/* Tests: the rnn_pack / rnn_gemm kernels to use from now on: 0 the CPU's best, 1 the plain
 * layout and OpenBLAS, 2 AVX2 and FMA, 3 AVX-512. false (nothing changed) where the CPU lacks
 * it. Not thread-safe: call it while no model runs. */
bool dt__nn_cpu_rnn_gemm_isa(int level);

void dt__nn_cpu_norm_fwd(const float *x, float *y, const float *mean, const float *var, size_t rows,
                         int cols, bool invert);
void dt__nn_cpu_norm_bwd(const float *dy, const float *var, float *dx, size_t rows, int cols,
                         bool invert, bool acc);
void dt__nn_cpu_cat_encode(const float *ids, int n, int t, int tokens, dt_nn_cat_mode mode,
                           float *y, float *bad);

/* The table of models built without one: the CPU's, or the guard's when DTRAIN_OPS_GUARD=1. */
const dt_nn_ops *dt__nn_ops_default(void);

#endif
