/* test_nn_rnn.c - the recurrent layers (SimpleRNN, LSTM, GRU, Bidirectional): finite-difference
 * gradients of every class and option (masks, go_backwards, return_sequences, reset_after, the
 * merge modes, dropout), float64 PyTorch parity of outputs and gradients, Keras's weight names,
 * shapes and parameter counts, the initializers (Orthogonal, unit_forget_bias), the dropout
 * masks, Embedding(mask_zero) padding and the refusals.
 *
 * A mask is given by hand: the InputLayer is made its source (mask_len, mask_src) and its
 * buffer filled after the model reserved its batch, as an Embedding with mask_zero would. */
#include "nn/layer.h"
#include "test_nn_util.h"

#include <math.h>
#include <sys/stat.h>
#include <unistd.h>

#define PY dt_test_python()
#define T_ 5 /* timesteps */
#define D_ 3 /* features */

static const dt_loss sce_logits = {.kind = DT_NN_LOSS_SPARSE_CE, .from_logits = true};
static const dt_loss mse = {.kind = DT_NN_LOSS_MSE};

#define DENSE(u, act)                                                                              \
    "{\"class_name\": \"Dense\", \"config\": {\"units\": " #u ", \"activation\": \"" act "\"}}"
#define FLATTEN "{\"class_name\": \"Flatten\", \"config\": {}}"

/* A recurrent layer's JSON: class and extra config ("\"units\": 4, ..."). Static buffers. */
static const char *rnn(const char *cls, const char *cfg)
{
    static char buf[8][1024];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "{\"class_name\": \"%s\", \"config\": {\"name\": \"%s\", %s}}", cls,
             !strcmp(cls, "SimpleRNN") ? "simple_rnn"
             : !strcmp(cls, "LSTM")    ? "lstm"
                                       : "gru",
             cfg);
    return b;
}

static const char *bidi(const char *inner, const char *extra)
{
    static char buf[4][2048];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0],
             "{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"bidirectional\", "
             "\"layer\": %s%s}}",
             inner, extra);
    return b;
}

/* Makes the InputLayer the source of a (n, T) mask for every layer that passes it on. */
static void set_mask(dt_model *m, const float *mask, int n, int T)
{
    dt__nn_graph *g = dt__nn_model_graph(m);
    g->layers[0].mask_len = T;
    for (int i = 0; i < g->n; i++) {
        dt__nn_layer *l = &g->layers[i];
        int s = i == 0 ? 0 : g->layers[l->in[0]].mask_src;
        bool pass =
            l->mask_rule == DT_NN_MASK_PASS && s >= 0 && l->out.rank >= 2 && l->out.d[0] == T;
        l->mask_src = (i == 0 || pass) ? 0 : -1;
    }
    size_t in = dt_model_input_size(m), out = dt_model_output_size(m);
    float *x = calloc(in * (size_t)n, sizeof *x), *y = malloc(out * (size_t)n * sizeof *y);
    dt_err err = {0};
    ASSERT_OK(dt_model_predict(m, x, n, y, &err), &err); /* reserves the batch and the mask */
    dt_model_ops(m)->upload(g->layers[0].mask, mask, (size_t)n * (size_t)T * sizeof *mask);
    free(x);
    free(y);
}

/* Samples 0..3 of a batch: all real; the last two steps masked (padding after); the first two
 * masked (padding before); steps 1 and 3 masked. Further samples repeat them. */
static void make_mask(float *mask, int n, int T)
{
    for (int b = 0; b < n; b++)
        for (int t = 0; t < T; t++) {
            int k = b % 4;
            mask[b * T + t] = k == 0   ? 1.0f
                              : k == 1 ? (float)(t < T - 2)
                              : k == 2 ? (float)(t >= 2)
                                       : (float)(t != 1 && t != 3);
        }
}

/* Central differences of the loss on up to 12 entries of every trainable weight (with mask
 * when given); fails on an entry where |analytic - numeric| > atol + rtol |numeric|. */
static int gradcheck(const char *json, dt_loss loss, bool masked)
{
    const int n = 4;
    dt_model *m = nn_build(json, 7);
    float mask[4 * T_];
    make_mask(mask, n, T_);
    if (masked)
        set_mask(m, mask, n, T_);
    nn_data d = nn_random(m, n, loss.kind, 11);
    dt_model_batch b = nn_batch(&d, loss.kind);
    dt_rng rng = *dt_model_rng(m);
    nn_loss_at(m, &loss, &b, &rng);
    size_t np;
    float *g0 = nn_grads_host(m, &np);
    int checked = 0;
    dt_rng pick;
    dt_rng_seed(&pick, 3);
    const double eps = 1e-2, atol = 3e-4, rtol = 4e-3;
    for (size_t wi = 0; wi < dt_model_weight_count(m); wi++) {
        const dt_model_weight *w = dt_model_weight_at(m, wi);
        for (int k = 0; w->trainable && k < 12; k++) {
            size_t i = w->offset + dt_rng_below(&pick, w->size);
            float keep = nn_param_get(m, i);
            nn_param_set(m, i, keep + (float)eps);
            double lp = nn_loss_at(m, &loss, &b, &rng);
            nn_param_set(m, i, keep - (float)eps);
            double lm = nn_loss_at(m, &loss, &b, &rng);
            nn_param_set(m, i, keep);
            double num = (lp - lm) / (2 * eps), ana = g0[i];
            if (!(fabs(ana - num) <= atol + rtol * fabs(num))) {
                fprintf(stderr, "gradcheck: %s[%zu]: analytic %.8g numeric %.8g\n%s\n", w->name,
                        i - w->offset, ana, num, json);
                exit(1);
            }
            checked++;
        }
    }
    free(g0);
    nn_data_free(&d);
    dt_model_free(m);
    return checked;
}

/* Dense -> the layer under test -> (Flatten) -> Dense: the first Dense's gradients check the
 * recurrent layer's input gradient. */
static void check(const char *layer, bool seq, bool masked)
{
    const char *json =
        seq ? nn_seq("5, 3", DENSE(4, "tanh"), layer, FLATTEN, DENSE(3, "linear"), NULL)
            : nn_seq("5, 3", DENSE(4, "tanh"), layer, DENSE(3, "linear"), NULL);
    ASSERT_GT(gradcheck(json, sce_logits, masked), 20);
}

static const char *const cells[] = {
    "SimpleRNN",
    "\"units\": 4",
    "LSTM",
    "\"units\": 4",
    "GRU",
    "\"units\": 4",
    "GRU",
    "\"units\": 4, \"reset_after\": false",
    "LSTM",
    "\"units\": 3, \"recurrent_activation\": \"hard_sigmoid\", \"seed\": null",
    "GRU",
    "\"units\": 3, \"recurrent_activation\": \"hard_sigmoid\", \"implementation\": 2",
    /* linear, not relu: a step of 1e-2 moves some of relu's inputs across its kink (the
     * PyTorch parity test checks relu) */
    "SimpleRNN",
    "\"units\": 3, \"activation\": \"linear\", \"use_bias\": false",
    "LSTM",
    "\"units\": 3, \"use_bias\": false, \"unit_forget_bias\": false",
};
#define N_CELLS (sizeof cells / sizeof cells[0] / 2)

DT_TEST(nn_rnn_grad_cells)
{
    for (size_t i = 0; i < N_CELLS; i++)
        for (int v = 0; v < 4; v++) { /* return_sequences x go_backwards */
            char cfg[512];
            snprintf(cfg, sizeof cfg, "%s, \"return_sequences\": %s, \"go_backwards\": %s",
                     cells[2 * i + 1], v & 1 ? "true" : "false", v & 2 ? "true" : "false");
            check(rnn(cells[2 * i], cfg), v & 1, false);
        }
}

DT_TEST(nn_rnn_grad_masked)
{
    for (size_t i = 0; i < N_CELLS; i++)
        for (int v = 0; v < 6; v++) { /* return_sequences x go_backwards, zero_output_for_mask */
            char cfg[512];
            snprintf(cfg, sizeof cfg,
                     "%s, \"return_sequences\": %s, \"go_backwards\": %s, "
                     "\"zero_output_for_mask\": %s",
                     cells[2 * i + 1], v & 1 ? "true" : "false", v & 2 ? "true" : "false",
                     v >= 4 ? "true" : "false");
            check(rnn(cells[2 * i], cfg), v & 1, true);
        }
}

DT_TEST(nn_rnn_grad_bidirectional)
{
    static const char *const modes[] = {"concat", "sum", "mul", "ave"};
    for (size_t i = 0; i < N_CELLS; i += 2)
        for (int v = 0; v < 16; v++) { /* merge mode x return_sequences x masked */
            char cfg[512], extra[64];
            snprintf(cfg, sizeof cfg, "%s, \"return_sequences\": %s, \"go_backwards\": %s",
                     cells[2 * i + 1], v & 1 ? "true" : "false", v == 6 ? "true" : "false");
            snprintf(extra, sizeof extra, ", \"merge_mode\": \"%s\"", modes[v >> 2]);
            check(bidi(rnn(cells[2 * i], cfg), extra), v & 1, v & 2);
        }
}

/* Two stacked layers, the first returning sequences: the mask passes through it. */
DT_TEST(nn_rnn_grad_stacked_masked)
{
    const char *json = nn_seq("5, 3", rnn("GRU", "\"units\": 4, \"return_sequences\": true"),
                              bidi(rnn("LSTM", "\"units\": 3"), ""), DENSE(3, "linear"), NULL);
    ASSERT_GT(gradcheck(json, sce_logits, true), 20);
    ASSERT_GT(gradcheck(json, sce_logits, false), 20);
}

/* ---- Keras's names, shapes, counts and initial values ---------------------------------------- */

static void expect_weight(dt_model *m, const char *name, int rows, int cols)
{
    const dt_model_weight *w = dt_model_find_weight(m, name);
    if (!w)
        DT_FAIL_("no weight %s", name);
    ASSERT_EQ(w->ndim, cols ? 2 : 1);
    ASSERT_EQ(w->shape[0], rows);
    if (cols)
        ASSERT_EQ(w->shape[1], cols);
}

DT_TEST(nn_rnn_keras_names_and_counts)
{
    /* Keras's model.summary() counts, input (5, 10): units (in + units + 1) per gate; GRU with
     * reset_after has two biases. */
    static const struct {
        const char *cls, *cfg;
        size_t params;
        const char *kernel, *bias;
        int bias_rows, bias_cols;
    } cases[] = {
        {"SimpleRNN", "\"units\": 32", 32 * (10 + 32 + 1), "simple_rnn/simple_rnn_cell/kernel",
         "simple_rnn/simple_rnn_cell/bias", 32, 0},
        {"LSTM", "\"units\": 32", 4 * 32 * (10 + 32 + 1), "lstm/lstm_cell/kernel",
         "lstm/lstm_cell/bias", 128, 0},
        {"GRU", "\"units\": 32", 3 * 32 * (10 + 32 + 2), "gru/gru_cell/kernel", "gru/gru_cell/bias",
         2, 96},
        {"GRU", "\"units\": 32, \"reset_after\": false", 3 * 32 * (10 + 32 + 1),
         "gru/gru_cell/kernel", "gru/gru_cell/bias", 96, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dt_model *m = nn_build(nn_seq("5, 10", rnn(cases[i].cls, cases[i].cfg), NULL), 1);
        size_t total;
        dt_model_param_counts(m, &total, NULL, NULL);
        ASSERT_EQ(total, cases[i].params);
        int g = (int)(cases[i].params / 32 / (10 + 32 + 1));
        g = !strcmp(cases[i].cls, "LSTM") ? 4 : !strcmp(cases[i].cls, "GRU") ? 3 : 1;
        expect_weight(m, cases[i].kernel, 10, 32 * g);
        expect_weight(m, cases[i].bias, cases[i].bias_rows, cases[i].bias_cols);
        dt_model_free(m);
    }
    /* Bidirectional, Keras 2 form (the wrapped layer as written) and Keras 3 form (the forward
     * layer named forward_..., the backward layer given): the same names. */
    const char *k2 = bidi(rnn("LSTM", "\"units\": 16, \"return_sequences\": true"), "");
    const char *k3 =
        bidi("{\"module\": \"keras.layers\", \"class_name\": \"LSTM\", \"config\": {\"name\": "
             "\"forward_lstm\", \"units\": 16, \"return_sequences\": true, \"seed\": null}, "
             "\"registered_name\": null}",
             ", \"merge_mode\": \"concat\", \"backward_layer\": {\"module\": \"keras.layers\", "
             "\"class_name\": \"LSTM\", \"config\": {\"name\": \"backward_lstm\", \"units\": 16, "
             "\"return_sequences\": true, \"go_backwards\": true, \"seed\": null}, "
             "\"registered_name\": null}");
    const char *forms[] = {k2, k3};
    for (int f = 0; f < 2; f++) {
        dt_model *m = nn_build(nn_seq("5, 10", forms[f], NULL), 1);
        size_t total;
        dt_model_param_counts(m, &total, NULL, NULL);
        ASSERT_EQ(total, 2u * 4 * 16 * (10 + 16 + 1));
        expect_weight(m, "bidirectional/forward_lstm/lstm_cell/kernel", 10, 64);
        expect_weight(m, "bidirectional/forward_lstm/lstm_cell/recurrent_kernel", 16, 64);
        expect_weight(m, "bidirectional/backward_lstm/lstm_cell/kernel", 10, 64);
        expect_weight(m, "bidirectional/backward_lstm/lstm_cell/bias", 64, 0);
        int64_t shape[DT_NN_MAX_RANK];
        ASSERT_EQ(dt_model_output_shape(m, shape), 2);
        ASSERT_EQ(shape[0], 5);
        ASSERT_EQ(shape[1], 32);
        dt_model_free(m);
    }
}

DT_TEST(nn_rnn_initializers)
{
    /* Orthogonal recurrent kernels: (u, G u) has orthonormal rows; a square one is orthogonal.
     * LSTM's unit_forget_bias: the forget gate's bias is 1, the rest 0. */
    dt_model *m = nn_build(nn_seq("5, 3", rnn("LSTM", "\"units\": 8, \"return_sequences\": true"),
                                  rnn("SimpleRNN", "\"units\": 6"), NULL),
                           5);
    const dt_model_weight *r = dt_model_find_weight(m, "lstm/lstm_cell/recurrent_kernel");
    ASSERT_TRUE(r != NULL);
    float *rd = nn_wdata_host(m, r);
    double worst = 0;
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) {
            double d = 0;
            for (int k = 0; k < 32; k++)
                d += (double)rd[i * 32 + k] * rd[j * 32 + k];
            worst = fmax(worst, fabs(d - (i == j)));
        }
    printf("  lstm recurrent kernel: worst |W W^T - I| %.3g\n", worst);
    ASSERT_TRUE(worst < 1e-5);
    free(rd);
    const dt_model_weight *s =
        dt_model_find_weight(m, "simple_rnn/simple_rnn_cell/recurrent_kernel");
    float *sd = nn_wdata_host(m, s);
    worst = 0;
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 6; j++) {
            double d = 0, e = 0;
            for (int k = 0; k < 6; k++) {
                d += (double)sd[i * 6 + k] * sd[j * 6 + k];
                e += (double)sd[k * 6 + i] * sd[k * 6 + j];
            }
            worst = fmax(worst, fmax(fabs(d - (i == j)), fabs(e - (i == j))));
        }
    ASSERT_TRUE(worst < 1e-5);
    free(sd);
    float *bd = nn_weight_get(m, "lstm/lstm_cell/bias", NULL);
    for (int i = 0; i < 32; i++)
        ASSERT_TRUE(bd[i] == ((i >= 8 && i < 16) ? 1.0f : 0.0f));
    free(bd);
    /* Not all one value: the kernel is Glorot-uniform within its limit. */
    const dt_model_weight *k = dt_model_find_weight(m, "lstm/lstm_cell/kernel");
    double lim = sqrt(6.0 / (3 + 32)), mx = 0;
    float *kd = nn_wdata_host(m, k);
    for (size_t i = 0; i < k->size; i++)
        mx = fmax(mx, fabs(kd[i]));
    free(kd);
    ASSERT_TRUE(mx <= lim);
    ASSERT_TRUE(mx > lim / 2);
    dt_model_free(m);
}

/* ---- refusals -------------------------------------------------------------------------------- */

static void refused(const char *layer, const char *shape, const char *want1, const char *want2)
{
    const char *json = nn_seq(shape, layer, NULL);
    dt_err err = {0};
    dt_model *m = NULL;
    dt_status st = dt_model_from_json(json, strlen(json), NULL, &m, &err);
    ASSERT_NE(st, DT_OK);
    ASSERT_TRUE(m == NULL);
    ASSERT_CONTAINS(err.msg, "$.config.layers[1]");
    ASSERT_CONTAINS(err.msg, want1);
    if (want2)
        ASSERT_CONTAINS(err.msg, want2);
}

DT_TEST(nn_rnn_refusals)
{
    refused(rnn("LSTM", "\"units\": 4, \"stateful\": true"), "5, 3", "'stateful'", "zero states");
    refused(rnn("LSTM", "\"units\": 4, \"return_state\": true"), "5, 3", "'return_state'", NULL);
    refused(rnn("GRU", "\"units\": 4, \"time_major\": true"), "5, 3", "'time_major'", NULL);
    refused(rnn("GRU", "\"units\": 4, \"dropout\": 1"), "5, 3", "'dropout': 1", "[0, 1)");
    refused(rnn("SimpleRNN", "\"units\": 4, \"recurrent_dropout\": 0.1"), "5, 3",
            "'recurrent_dropout': 0.1", "not implemented");
    refused(rnn("LSTM", "\"units\": 4, \"activation\": \"softplus\""), "5, 3", "'activation'",
            "softplus");
    refused(rnn("LSTM", "\"units\": 0"), "5, 3", "'units'", NULL);
    refused(rnn("LSTM", "\"units\": 4, \"recurrent_constraint\": \"non_neg\""), "5, 3",
            "'recurrent_constraint'", NULL);
    refused(rnn("SimpleRNN", "\"units\": 4, \"recurrent_activation\": \"sigmoid\""), "5, 3",
            "'recurrent_activation'", "not supported");
    refused(rnn("LSTM", "\"units\": 4"), "5, 3, 2", "(timesteps, features)", NULL);
    refused(bidi(rnn("LSTM", "\"units\": 4"), ", \"merge_mode\": null"), "5, 3", "'merge_mode'",
            NULL);
    refused(bidi(rnn("LSTM", "\"units\": 4, \"recurrent_dropout\": 0.5"), ""), "5, 3",
            "'layer' (LSTM 'lstm')", "'dropout'");
    refused(bidi(rnn("LSTM", "\"units\": 4, \"colour\": 1"), ""), "5, 3", "'layer'", "'colour'");
    refused(bidi(DENSE(4, "tanh"), ""), "5, 3", "'layer'", "class Dense");
    refused(bidi(rnn("LSTM", "\"units\": 4"),
                 ", \"backward_layer\": {\"class_name\": \"LSTM\", \"config\": {\"name\": "
                 "\"backward_lstm\", \"units\": 5, \"go_backwards\": true}}"),
            "5, 3", "'backward_layer'", "mirror");
}

/* ---- PyTorch parity ---------------------------------------------------------------------------
 * The reference (below) runs each case in float64 from dtrain's float32 weights and inputs: a
 * loop over timesteps with Keras's rules written out in torch ops (masks, go_backwards, both GRU
 * forms, both hard_sigmoids), differentiated by autograd; where no mask is set and the cell is one
 * torch has (torch.nn.RNN tanh, LSTM, GRU = Keras's reset_after GRU with the gates reordered), it
 * first checks that loop against torch.nn's module to 1e-10, outputs and gradients. The loss is
 * the mean squared error against random targets, as dtrain's MSE; one file per case. Measured:
 * outputs agree to 1.9e-7 and gradients to 4.8e-7 of the largest value (float32 rounding). */
static const char *ref_py =
    "import sys, os, torch\n"
    "torch.set_default_dtype(torch.float64)\n"
    "T=torch\n"
    "def act(k, x):\n"
    "    return {0: lambda v: v, 1: T.relu, 2: T.sigmoid, 3: T.tanh,\n"
    "            4: lambda v: T.clamp(0.2*v+0.5, 0, 1), 5: lambda v: T.clamp(v/6+0.5, 0, "
    "1)}[k](x)\n"
    "def run(c, x, mask, K, R, B, rev, zero):\n"
    "    n, t_, _ = x.shape; u = c['u']; h = T.zeros(n, u); cs = T.zeros(n, u); outs = []\n"
    "    A = lambda v: act(c['act'], v); G = lambda v: act(c['rec'], v)\n"
    "    for t in (range(t_-1, -1, -1) if rev else range(t_)):\n"
    "        m = mask[:, t:t+1]; xp = x[:, t] @ K\n"
    "        if B is not None: xp = xp + B[0]\n"
    "        cn = cs\n"
    "        if c['cell'] == 0: hn = A(xp + h @ R)\n"
    "        elif c['cell'] == 1:\n"
    "            z = xp + h @ R; i, f, g, o = z[:, :u], z[:, u:2*u], z[:, 2*u:3*u], z[:, 3*u:]\n"
    "            cn = G(f)*cs + G(i)*A(g); hn = G(o)*A(cn)\n"
    "        elif c['ra']:\n"
    "            r_ = h @ R\n"
    "            if B is not None: r_ = r_ + B[1]\n"
    "            z = G(xp[:, :u]+r_[:, :u]); r = G(xp[:, u:2*u]+r_[:, u:2*u])\n"
    "            hn = z*h + (1-z)*A(xp[:, 2*u:] + r*r_[:, 2*u:])\n"
    "        else:\n"
    "            r_ = h @ R[:, :2*u]; z = G(xp[:, :u]+r_[:, :u]); r = G(xp[:, u:2*u]+r_[:, u:])\n"
    "            hn = z*h + (1-z)*A(xp[:, 2*u:] + (r*h) @ R[:, 2*u:])\n"
    "        h = m*hn + (1-m)*h; cs = m*cn + (1-m)*cs\n"
    "        outs.append(m*h if zero else h)\n"
    "    return T.stack(outs, 1) if c['seq'] else outs[-1]\n"
    "def model(c, x, mask, W):\n"
    "    def dirw(d):\n"
    "        k = 3 if c['bias'] else 2; w = W[d*k:(d+1)*k]\n"
    "        B = None\n"
    "        if c['bias']: B = w[2].reshape(2, -1) if c['ra'] else w[2].reshape(1, -1)\n"
    "        return w[0], w[1], B\n"
    "    if not c['bidi']: return run(c, x, mask, *dirw(0), c['back'], c['zero'])\n"
    "    zero = c['seq']\n"
    "    yf = run(c, x, mask, *dirw(0), c['back'], zero)\n"
    "    yb = run(c, x, mask, *dirw(1), not c['back'], zero)\n"
    "    if c['seq']: yb = T.flip(yb, [1])\n"
    "    return [T.cat([yf, yb], -1), yf+yb, yf*yb, (yf+yb)/2][c['merge']]\n"
    "def module_check(c, x, W, y):\n"
    "    u = c['u']; D = x.shape[2]\n"
    "    if c['bidi'] or c['back'] or not c['bias'] or c['rec'] != 2 or c['act'] != 3: return\n"
    "    if c['cell'] == 2 and not c['ra']: return\n"
    "    K, R, b = [w.detach().clone() for w in W]\n"
    "    if c['cell'] == 0: mod = T.nn.RNN(D, u, batch_first=True)\n"
    "    elif c['cell'] == 1: mod = T.nn.LSTM(D, u, batch_first=True)\n"
    "    else: mod = T.nn.GRU(D, u, batch_first=True)\n"
    "    perm = T.arange(K.shape[1])\n"
    "    if c['cell'] == 2: perm = T.cat([T.arange(u, 2*u), T.arange(0, u), T.arange(2*u, 3*u)])\n"
    "    b = b.reshape(-1, K.shape[1])\n"
    "    with T.no_grad():\n"
    "        mod.weight_ih_l0.copy_(K[:, perm].T); mod.weight_hh_l0.copy_(R[:, perm].T)\n"
    "        mod.bias_ih_l0.copy_(b[0][perm]); mod.bias_hh_l0.copy_(b[1][perm] if c['ra'] else "
    "0*b[0])\n"
    "    out, _ = mod(x)\n"
    "    ym = out if c['seq'] else out[:, -1]\n"
    "    err = (ym - y).abs().max().item()\n"
    "    assert err < 1e-10, ('torch.nn module differs', err)\n"
    "    tgt = T.randn(ym.shape); (ym*tgt).sum().backward(); "
    "(y*tgt).sum().backward(retain_graph=True, inputs=[W[0], "
    "W[1]])\n"
    "    gk = mod.weight_ih_l0.grad.T[:, T.argsort(perm)]; gr = mod.weight_hh_l0.grad.T[:, "
    "T.argsort(perm)]\n"
    "    assert (gk - W[0].grad).abs().max().item() < 1e-10, 'kernel grad'\n"
    "    assert (gr - W[1].grad).abs().max().item() < 1e-10, 'recurrent grad'\n"
    "    W[0].grad = None; W[1].grad = None\n"
    "    print('module', ['SimpleRNN', 'LSTM', 'GRU'][c['cell']], 'agrees', err, file=sys.stderr)\n"
    "def vec(line): return T.tensor([float(v) for v in line.split()])\n"
    "for f in sorted(os.listdir(sys.argv[1])):\n"
    "    if not f.startswith('case'): continue\n"
    "    L = open(os.path.join(sys.argv[1], f)).read().split('\\n')\n"
    "    keys = "
    "['cell','u','D','T','n','seq','back','ra','bidi','merge','act','rec','zero','bias','nw']\n"
    "    c = dict(zip(keys, [int(v) for v in L[0].split()]))\n"
    "    n, t_, D = c['n'], c['T'], c['D']\n"
    "    x = vec(L[1]).reshape(n, t_, D); mask = vec(L[2]).reshape(n, t_); tgt = vec(L[3])\n"
    "    W = []\n"
    "    for i in range(c['nw']):\n"
    "        s = [int(v) for v in L[4+2*i].split()]\n"
    "        W.append(vec(L[5+2*i]).reshape(s).requires_grad_())\n"
    "    y = model(c, x, mask, W)\n"
    "    if mask.min() > 0: module_check(c, x, W, y)\n"
    "    loss = ((y.reshape(-1) - tgt)**2).mean(); loss.backward()\n"
    "    with open(os.path.join(sys.argv[1], 'out' + f[4:]), 'w') as o:\n"
    "        o.write(' '.join('%.17g' % v for v in y.detach().reshape(-1).tolist()) + '\\n')\n"
    "        for w in W: o.write(' '.join('%.17g' % v for v in w.grad.reshape(-1).tolist()) + "
    "'\\n')\n";

typedef struct pcase {
    const char *cls, *cfg;
    bool bidi, masked;
    int merge;
} pcase;

static void write_vec(FILE *f, const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%.9g ", (double)v[i]);
    fprintf(f, "\n");
}

static double *read_vec(FILE *f, size_t n)
{
    double *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        if (fscanf(f, "%lf", &v[i]) != 1)
            DT_FAIL_("reference output too short");
    return v;
}

/* Largest |a - b| over the largest |b| (1e-3 at least). */
static double rel_err(const float *a, const double *b, size_t n)
{
    double d = 0, mx = 1e-3;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs(a[i] - b[i]));
        mx = fmax(mx, fabs(b[i]));
    }
    return d / mx;
}

DT_TEST_TIMEOUT(nn_rnn_torch_parity, 300)
{
    if (access(PY, X_OK) != 0)
        DT_SKIP("no %s (Debian's python3)", PY);
    if (!dt_test_python_has("torch"))
        DT_SKIP("%s has no torch: apt-get install python3-torch", PY);
    static const pcase cases[] = {
        {"SimpleRNN", "\"units\": 5", false, false, 0},
        {"SimpleRNN", "\"units\": 5, \"activation\": \"relu\", \"use_bias\": false", false, true,
         0},
        {"SimpleRNN", "\"units\": 5, \"return_sequences\": true", false, false, 0},
        {"LSTM", "\"units\": 5", false, false, 0},
        {"LSTM", "\"units\": 5, \"return_sequences\": true", false, false, 0},
        {"GRU", "\"units\": 5", false, false, 0},
        {"GRU", "\"units\": 5, \"return_sequences\": true", false, false, 0},
        {"GRU", "\"units\": 5, \"reset_after\": false", false, false, 0},
        {"LSTM", "\"units\": 4, \"go_backwards\": true, \"return_sequences\": true", false, true,
         0},
        {"GRU", "\"units\": 4, \"go_backwards\": true", false, true, 0},
        {"GRU", "\"units\": 4, \"reset_after\": false, \"return_sequences\": true", false, true, 0},
        {"SimpleRNN", "\"units\": 4, \"return_sequences\": true, \"zero_output_for_mask\": true",
         false, true, 0},
        {"LSTM", "\"units\": 4, \"recurrent_activation\": \"hard_sigmoid\", \"implementation\": 2",
         false, true, 0},
        {"GRU", "\"units\": 4, \"recurrent_activation\": \"hard_sigmoid\", \"seed\": null", false,
         false, 0},
        {"LSTM", "\"units\": 4, \"use_bias\": false, \"return_sequences\": true", false, true, 0},
        {"LSTM", "\"units\": 4, \"return_sequences\": true", true, true, 0},
        {"GRU", "\"units\": 4", true, true, 1},
        {"SimpleRNN", "\"units\": 4, \"return_sequences\": true", true, false, 2},
        {"GRU", "\"units\": 4, \"reset_after\": false, \"return_sequences\": true", true, true, 3},
        {"LSTM", "\"units\": 4, \"go_backwards\": true", true, true, 2},
    };
    enum { N = 6, TT = 7, DD = 3 };
    const size_t nc = sizeof cases / sizeof cases[0];
    char dir[512];
    snprintf(dir, sizeof dir, "%s/rnn_ref", dt_test_tmpdir());
    mkdir(dir, 0700);
    dt_model *models[32];
    for (size_t i = 0; i < nc; i++) {
        static const char *const modes[] = {"concat", "sum", "mul", "ave"};
        char merge[64];
        snprintf(merge, sizeof merge, ", \"merge_mode\": \"%s\"", modes[cases[i].merge]);
        const char *layer = rnn(cases[i].cls, cases[i].cfg);
        if (cases[i].bidi)
            layer = bidi(layer, merge);
        dt_model *m = models[i] = nn_build(nn_seq("7, 3", layer, NULL), 100 + i);
        float mask[N * TT];
        for (int k = 0; k < N * TT; k++)
            mask[k] = 1;
        if (cases[i].masked) {
            make_mask(mask, N, TT);
            mask[5 * TT + 0] = 0; /* sample 5: steps 0 and 6 masked */
            mask[5 * TT + 6] = 0;
            set_mask(m, mask, N, TT);
        }
        nn_data d = nn_random(m, N, DT_NN_LOSS_MSE, 200 + i);
        size_t out = dt_model_output_size(m);
        dt__nn_layer *l = &dt__nn_model_graph(m)->layers[1];
        char path[600];
        snprintf(path, sizeof path, "%s/case%02zu", dir, i);
        FILE *f = fopen(path, "w");
        ASSERT_TRUE(f != NULL);
        fprintf(f, "%d %d %d %d %d %d %d %d %d %d %d %d %d %d %zu\n", l->rnn_cell, l->units, DD, TT,
                N, l->rnn_seq, l->rnn_back, l->rnn_reset_after, l->rnn_bidi, l->rnn_merge,
                l->rnn_act, l->rnn_rec, l->rnn_zero_masked, l->use_bias, dt_model_weight_count(m));
        write_vec(f, d.x, (size_t)N * TT * DD);
        write_vec(f, mask, (size_t)N * TT);
        write_vec(f, d.targets, out * N);
        for (size_t w = 0; w < dt_model_weight_count(m); w++) {
            const dt_model_weight *wt = dt_model_weight_at(m, w);
            for (int k = 0; k < wt->ndim; k++)
                fprintf(f, "%lld ", (long long)wt->shape[k]);
            fprintf(f, "\n");
            float *h = nn_wdata_host(m, wt);
            write_vec(f, h, wt->size);
            free(h);
        }
        fclose(f);
        /* dtrain's side: the outputs and one step's gradients on this batch. */
        dt_err err = {0};
        dt_step_stats st;
        dt_model_batch b = nn_batch(&d, DT_NN_LOSS_MSE);
        ASSERT_OK(dt_model_train_step(m, &mse, &b, N, &st, &err), &err);
        nn_data_free(&d);
    }
    char script[600], cmd[1400];
    snprintf(script, sizeof script, "%s/ref.py", dir);
    FILE *f = fopen(script, "w");
    fputs(ref_py, f);
    fclose(f);
    dt_test_python_cmd(cmd, sizeof cmd, " %s %s", script, dir);
    ASSERT_EQ(system(cmd), 0);
    double worst_y = 0, worst_g = 0;
    for (size_t i = 0; i < nc; i++) {
        dt_model *m = models[i];
        char path[600];
        snprintf(path, sizeof path, "%s/out%02zu", dir, i);
        FILE *o = fopen(path, "r");
        ASSERT_TRUE(o != NULL);
        size_t out = dt_model_output_size(m);
        double *ry = read_vec(o, out * N);
        const float *py = dt_model_last_predictions(m);
        double ey = rel_err(py, ry, out * N), eg = 0;
        for (size_t w = 0; w < dt_model_weight_count(m); w++) {
            const dt_model_weight *wt = dt_model_weight_at(m, w);
            double *rg = read_vec(o, wt->size);
            float *hg = nn_wgrad_host(m, wt);
            eg = fmax(eg, rel_err(hg, rg, wt->size));
            free(hg);
            free(rg);
        }
        printf("  %-9s %-80s bidi %d mask %d: output %.2e grads %.2e\n", cases[i].cls, cases[i].cfg,
               cases[i].bidi, cases[i].masked, ey, eg);
        ASSERT_TRUE(ey < 1e-6);
        ASSERT_TRUE(eg < 2e-6);
        worst_y = fmax(worst_y, ey);
        worst_g = fmax(worst_g, eg);
        free(ry);
        fclose(o);
        dt_model_free(m);
    }
    printf("  worst: output %.2e, gradients %.2e (relative to the largest value)\n", worst_y,
           worst_g);
}

/* Two identical steps give bit-identical gradients (no reduction order depends on timing). */
DT_TEST(nn_rnn_deterministic)
{
    const char *json =
        nn_seq("5, 3", bidi(rnn("GRU", "\"units\": 6, \"return_sequences\": true"), ""),
               rnn("LSTM", "\"units\": 5"), DENSE(3, "linear"), NULL);
    size_t np;
    float *g[2];
    for (int r = 0; r < 2; r++) {
        dt_model *m = nn_build(json, 9);
        nn_data d = nn_random(m, 8, DT_NN_LOSS_SPARSE_CE, 4);
        dt_model_batch b = nn_batch(&d, DT_NN_LOSS_SPARSE_CE);
        dt_err err = {0};
        dt_step_stats st;
        ASSERT_OK(dt_model_train_step(m, &sce_logits, &b, 8, &st, &err), &err);
        g[r] = nn_grads_host(m, &np);
        nn_data_free(&d);
        dt_model_free(m);
    }
    ASSERT_GT(np, 0u);
    ASSERT_EQ(memcmp(g[0], g[1], np * sizeof(float)), 0);
    free(g[0]);
    free(g[1]);
}

/* ---- with Embedding(mask_zero): the mask made by the layer that Keras makes it in ----------- */

#define EMB                                                                                        \
    "{\"class_name\": \"Embedding\", \"config\": {\"name\": \"embedding\", \"input_dim\": "        \
    "10, \"output_dim\": 4, \"mask_zero\": true}}"

/* The same tokens padded with 0 before, after or around them give the same final output (a
 * masked step keeps the state), forward, backward and both ways; without the mask they do not. */
DT_TEST(nn_rnn_embedding_mask_zero_padding)
{
    static const float ids[4][6] = {
        {3, 5, 2, 0, 0, 0}, {0, 0, 0, 3, 5, 2}, {0, 3, 0, 5, 2, 0}, {3, 5, 2, 9, 9, 9}};
    const char *layers[] = {
        rnn("LSTM", "\"units\": 5"),
        rnn("GRU", "\"units\": 5, \"go_backwards\": true"),
        rnn("GRU", "\"units\": 5, \"reset_after\": false"),
        rnn("SimpleRNN", "\"units\": 5"),
        bidi(rnn("LSTM", "\"units\": 3"), ", \"merge_mode\": \"sum\""),
        bidi(rnn("GRU", "\"units\": 3, \"return_sequences\": true"), ""),
    };
    for (size_t k = 0; k < sizeof layers / sizeof layers[0]; k++) {
        bool seq = k == 5;
        /* the second layer reads the first's sequence with the mask passed on */
        const char *json = seq ? nn_seq("6", EMB, layers[k], rnn("LSTM", "\"units\": 4"), NULL)
                               : nn_seq("6", EMB, layers[k], NULL);
        dt_model *m = nn_build(json, 21);
        size_t out = dt_model_output_size(m);
        float y[4 * 8];
        dt_err err = {0};
        ASSERT_OK(dt_model_predict(m, &ids[0][0], 4, y, &err), &err);
        double same = 0, other = 0;
        for (size_t j = 0; j < out; j++) {
            same = fmax(same, fmax(fabs(y[j] - y[out + j]), fabs(y[j] - y[2 * out + j])));
            other = fmax(other, fabs(y[j] - y[3 * out + j]));
        }
        ASSERT_TRUE(same < 1e-6);
        ASSERT_TRUE(other > 1e-4); /* real tokens 9 in place of the padding change it */
        dt_model_free(m);
    }
}

/* Finite differences through Embedding -> recurrent layer with padded ids: the embeddings'
 * gradient goes only to the rows of real tokens, and matches the loss's differences. */
DT_TEST(nn_rnn_embedding_mask_zero_grad)
{
    static const float ids[4][6] = {
        {3, 5, 2, 0, 0, 0}, {0, 0, 1, 3, 5, 2}, {7, 3, 0, 5, 2, 0}, {4, 5, 2, 9, 8, 6}};
    const char *layers[] = {
        rnn("LSTM", "\"units\": 4"),
        rnn("GRU", "\"units\": 4, \"return_sequences\": true, \"go_backwards\": true"),
        bidi(rnn("GRU", "\"units\": 3, \"reset_after\": false, \"return_sequences\": true"),
             ", \"merge_mode\": \"mul\""),
    };
    for (size_t k = 0; k < sizeof layers / sizeof layers[0]; k++) {
        const char *json = nn_seq("6", EMB, layers[k], k ? FLATTEN : DENSE(3, "linear"),
                                  k ? DENSE(3, "linear") : NULL, NULL);
        dt_model *m = nn_build(json, 5);
        int32_t labels[4] = {0, 1, 2, 1};
        dt_model_batch b = {.x = &ids[0][0], .labels = labels, .n = 4};
        dt_rng rng = *dt_model_rng(m);
        nn_loss_at(m, &sce_logits, &b, &rng);
        size_t np;
        float *g0 = nn_grads_host(m, &np);
        const dt_model_weight *e = dt_model_find_weight(m, "embedding/embeddings");
        ASSERT_TRUE(e != NULL);
        for (int j = 0; j < 4; j++) /* row 0 is the padding: no gradient */
            ASSERT_TRUE(g0[e->offset + j] == 0.0f);
        int checked = 0;
        for (size_t wi = 0; wi < dt_model_weight_count(m); wi++) {
            const dt_model_weight *w = dt_model_weight_at(m, wi);
            for (size_t i = w->offset; i < w->offset + w->size; i += 1 + w->size / 9) {
                float keep = nn_param_get(m, i);
                nn_param_set(m, i, keep + 1e-2f);
                double lp = nn_loss_at(m, &sce_logits, &b, &rng);
                nn_param_set(m, i, keep - 1e-2f);
                double lm = nn_loss_at(m, &sce_logits, &b, &rng);
                nn_param_set(m, i, keep);
                double num = (lp - lm) / 2e-2;
                if (!(fabs(g0[i] - num) <= 3e-4 + 4e-3 * fabs(num)))
                    DT_FAIL_("%s[%zu]: analytic %.8g numeric %.8g", w->name, i - w->offset,
                             (double)g0[i], num);
                checked++;
            }
        }
        ASSERT_GT(checked, 30);
        free(g0);
        dt_model_free(m);
    }
}

/* A Keras 2 (tf.keras 2.13) model.to_json() as written for Bidirectional(LSTM(16,
 * input_shape=(10, 8))) first in a Sequential: the wrapped layer carries the input shape and every
 * Keras 2 key. model.summary(): bidirectional 3,200 (2 x 4 x 16 x (8 + 16 + 1)), dense 33. */
DT_TEST(nn_rnn_keras2_bidirectional_first_layer)
{
    static const char json[] =
        "{\"class_name\": \"Sequential\", \"config\": {\"name\": \"sequential\", \"layers\": "
        "[{\"class_name\": \"Bidirectional\", \"config\": {\"name\": \"bidirectional\", "
        "\"trainable\": true, \"dtype\": \"float32\", \"layer\": {\"class_name\": \"LSTM\", "
        "\"config\": {\"name\": \"lstm\", \"trainable\": true, \"batch_input_shape\": [null, 10, "
        "8], \"dtype\": \"float32\", \"return_sequences\": false, \"return_state\": false, "
        "\"go_backwards\": false, \"stateful\": false, \"unroll\": false, \"time_major\": false, "
        "\"units\": 16, \"activation\": \"tanh\", \"recurrent_activation\": \"sigmoid\", "
        "\"use_bias\": true, \"kernel_initializer\": {\"class_name\": \"GlorotUniform\", "
        "\"config\": {\"seed\": null}}, \"recurrent_initializer\": {\"class_name\": "
        "\"Orthogonal\", \"config\": {\"gain\": 1.0, \"seed\": null}}, \"bias_initializer\": "
        "{\"class_name\": \"Zeros\", \"config\": {}}, \"unit_forget_bias\": true, "
        "\"kernel_regularizer\": null, \"recurrent_regularizer\": null, \"bias_regularizer\": "
        "null, \"activity_regularizer\": null, \"kernel_constraint\": null, "
        "\"recurrent_constraint\": null, \"bias_constraint\": null, \"dropout\": 0.0, "
        "\"recurrent_dropout\": 0.0, \"implementation\": 2}}, \"merge_mode\": \"concat\"}}, "
        "{\"class_name\": \"Dense\", \"config\": {\"name\": \"dense\", \"units\": 1, "
        "\"activation\": \"sigmoid\"}}]}, \"keras_version\": \"2.13.1\", \"backend\": "
        "\"tensorflow\"}";
    dt_model *m = nn_build(json, 3);
    size_t total;
    dt_model_param_counts(m, &total, NULL, NULL);
    ASSERT_EQ(total, 3233u);
    int64_t shape[DT_NN_MAX_RANK];
    ASSERT_EQ(dt_model_input_shape(m, shape), 2);
    ASSERT_EQ(shape[0], 10);
    ASSERT_EQ(shape[1], 8);
    expect_weight(m, "bidirectional/backward_lstm/lstm_cell/recurrent_kernel", 16, 64);
    dt_model_free(m);
}

/* kernel_, recurrent_ and bias_regularizer reach the loss and the gradients (the finite
 * differences are of the loss with the penalties), and the penalty is Keras's
 * l1 sum |w| + l2 sum w^2 of each weight. */
DT_TEST(nn_rnn_regularizers)
{
    const char *reg = "\"units\": 4, \"kernel_regularizer\": {\"class_name\": \"L2\", \"config\": "
                      "{\"l2\": 0.05}}, \"recurrent_regularizer\": {\"class_name\": \"L1\", "
                      "\"config\": {\"l1\": 0.02}}, \"bias_regularizer\": {\"class_name\": "
                      "\"L1L2\", \"config\": {\"l1\": 0.01, \"l2\": 0.03}}, \"bias_initializer\": "
                      "\"ones\"";
    check(rnn("LSTM", reg), false, false);
    check(bidi(rnn("GRU", reg), ""), false, true);
    dt_model *m = nn_build(nn_seq("5, 3", rnn("LSTM", reg), NULL), 2);
    nn_data d = nn_random(m, 2, DT_NN_LOSS_MSE, 1);
    dt_model_batch b = nn_batch(&d, DT_NN_LOSS_MSE);
    dt_step_stats with, plain;
    dt_err err = {0};
    ASSERT_OK(dt_model_evaluate(m, &mse, &b, &with, &err), &err);
    double pen = 0;
    const float l1[3] = {0, 0.02f, 0.01f}, l2[3] = {0.05f, 0, 0.03f};
    for (int k = 0; k < 3; k++) {
        const dt_model_weight *w = dt_model_weight_at(m, (size_t)k);
        float *h = nn_wdata_host(m, w);
        for (size_t i = 0; i < w->size; i++)
            pen += l1[k] * fabs(h[i]) + l2[k] * (double)h[i] * h[i];
        free(h);
    }
    dt_model *m0 = nn_build(
        nn_seq("5, 3", rnn("LSTM", "\"units\": 4, \"bias_initializer\": \"ones\""), NULL), 2);
    ASSERT_OK(dt_model_evaluate(m0, &mse, &b, &plain, &err), &err);
    ASSERT_TRUE(pen > 0.1);
    ASSERT_NEAR(with.loss - plain.loss, pen, 1e-4 * pen);
    nn_data_free(&d);
    dt_model_free(m);
    dt_model_free(m0);
}

/* ---- dropout: the input's mask, the same at every timestep ------------------------------------
 */

/* Finite differences in training mode (the model's dropout stream rewound for every loss):
 * one mask for all gates, one per gate ("implementation": 1), both directions of a
 * Bidirectional, with a sequence mask. */
DT_TEST(nn_rnn_grad_dropout)
{
    check(rnn("LSTM", "\"units\": 4, \"dropout\": 0.4"), false, false);
    check(rnn("GRU", "\"units\": 4, \"dropout\": 0.4, \"implementation\": 1, "
                     "\"return_sequences\": true"),
          true, true);
    check(rnn("GRU", "\"units\": 4, \"dropout\": 0.3, \"reset_after\": false, "
                     "\"go_backwards\": true"),
          false, true);
    check(rnn("SimpleRNN", "\"units\": 4, \"dropout\": 0.5"), false, false);
    check(bidi(rnn("LSTM", "\"units\": 3, \"dropout\": 0.4, \"implementation\": 1, "
                           "\"return_sequences\": true"),
               ", \"merge_mode\": \"sum\""),
          true, true);
}

/* A SimpleRNN whose kernel is the identity and whose recurrent kernel is 0 outputs its input
 * under the dropout mask: per sample one mask over the features, 0 or 1 / (1 - rate), the same
 * at every timestep, dropping about `rate` of them; a new draw every step; none in inference. */
DT_TEST(nn_rnn_dropout_mask)
{
    enum { N = 64, TT = 4, F = 8 };
    dt_model *m = nn_build(nn_seq("4, 8",
                                  rnn("SimpleRNN", "\"units\": 8, \"activation\": \"linear\", "
                                                   "\"use_bias\": false, \"dropout\": 0.5, "
                                                   "\"return_sequences\": true"),
                                  NULL),
                           3);
    float eye[F * F] = {0}, zero[F * F] = {0};
    for (int i = 0; i < F; i++)
        eye[i * F + i] = 1;
    dt_err err = {0};
    ASSERT_OK(dt_model_set_weight(m, "simple_rnn/simple_rnn_cell/kernel", eye, F * F, &err), &err);
    ASSERT_OK(
        dt_model_set_weight(m, "simple_rnn/simple_rnn_cell/recurrent_kernel", zero, F * F, &err),
        &err);
    static float x[N * TT * F], t[N * TT * F], y[N * TT * F], first[N * TT * F];
    for (int i = 0; i < N * TT * F; i++)
        x[i] = 1;
    dt_model_batch b = {.x = x, .targets = t, .n = N};
    dt_step_stats st;
    for (int step = 0; step < 2; step++) {
        ASSERT_OK(dt_model_train_step(m, &mse, &b, N, &st, &err), &err);
        const float *p = dt_model_last_predictions(m);
        int dropped = 0;
        for (int s = 0; s < N; s++)
            for (int k = 0; k < F; k++) {
                float v = p[(s * TT) * F + k];
                ASSERT_TRUE(v == 0.0f || v == 2.0f);
                dropped += v == 0.0f;
                for (int tt = 1; tt < TT; tt++)
                    ASSERT_TRUE(p[(s * TT + tt) * F + k] == v);
            }
        ASSERT_GT(dropped, N * F / 2 - 60); /* 256 expected, sd 11 */
        ASSERT_LT(dropped, N * F / 2 + 60);
        if (step == 0)
            memcpy(first, p, sizeof first);
        else
            ASSERT_NE(memcmp(first, p, sizeof first), 0);
    }
    ASSERT_OK(dt_model_predict(m, x, N, y, &err), &err); /* a step computes, nothing updates */
    for (int i = 0; i < N * TT * F; i++)
        ASSERT_TRUE(fabsf(y[i] - 1.0f) < 1e-6f);
    dt_model_free(m);
}
