/*
 * hw.h - the host's GPUs as the daemon reports them to the cluster, found without CUDA.
 *
 *     dt_hw_gpus g;
 *     dt_hw_count_gpus("/dev", "/proc/driver/nvidia/gpus", getenv("CUDA_VISIBLE_DEVICES"), &g);
 *     // g.count 2, g.model "NVIDIA H200"
 *
 * The daemon never loads CUDA (a CPU-only run must not pay for its initialisation, and the same
 * binaries run on hosts with no driver), so GPUs are counted from the driver's files: one
 * /dev/nvidiaN per GPU, and /proc/driver/nvidia/gpus/<PCI bus id>/information for each one's
 * "Model:" and "GPU UUID:". CUDA_VISIBLE_DEVICES is honoured as CUDA reads it: a comma-separated
 * list of indices or UUIDs ("GPU-..." or "MIG-...", or a prefix of one); the list ends at its
 * first invalid entry (an index past the devices present, a negative one, a UUID that matches no
 * GPU when the UUIDs can be read); "" or "-1" hides every GPU. A GPU listed twice counts once.
 * Indices map onto the GPUs in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID's; CUDA's default
 * order puts the fastest first, which is the same order on hosts of one model).
 *
 * Threads: any; it reads files only.
 */
#ifndef DT_CORE_HW_H
#define DT_CORE_HW_H

#define DT_HW_GPU_MODEL_LEN 96 /* the model text, at most (longer text is cut) */
#define DT_HW_MAX_GPUS      64 /* GPUs of one host, at most */

typedef struct dt_hw_gpus {
    int count; /* visible GPUs */
    /* Their model ("NVIDIA H200"), their distinct models joined by ", " on a mixed host, or ""
     * when none is visible or the driver's /proc files are absent (a container without them). */
    char model[DT_HW_GPU_MODEL_LEN];
} dt_hw_gpus;

/* Counts the GPUs under dev_dir (its nvidiaN entries) that visible (CUDA_VISIBLE_DEVICES; NULL
 * when unset) leaves visible, and reads their models from proc_dir (the driver's gpus folder).
 * A missing dir counts as no GPU and no model. */
void dt_hw_count_gpus(const char *dev_dir, const char *proc_dir, const char *visible,
                      dt_hw_gpus *out);

#endif
