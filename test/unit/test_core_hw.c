/* core/hw: the host's GPUs counted from a fake driver layout (device nodes and /proc files) as
 * CUDA_VISIBLE_DEVICES leaves them, with their models, and nothing when the driver is absent. */
#include "dt_test.h"

#include "core/hw.h"

#include <sys/stat.h>

static char dev[600], proc[600];

/* A GPU: /dev/nvidiaMINOR and, with a model, its /proc folder named by bus id (minor < 0: the
 * information file has no "Device Minor:" line, as older drivers write it). */
static void add_gpu(int minor, const char *bus, const char *model, const char *uuid)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/nvidia%d", dev, minor < 0 ? -minor - 1 : minor);
    FILE *f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fclose(f);
    if (!model)
        return;
    snprintf(path, sizeof path, "%s/%s", proc, bus);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/information", proc, bus);
    f = fopen(path, "w");
    ASSERT_TRUE(f != NULL);
    fprintf(f,
            "Model: \t\t %s \nIRQ:   \t\t 1\nGPU UUID: \t %s\nVideo BIOS: \t ??.??.??.??.??\n"
            "Bus Type: \t PCIe\nDMA Size: \t 47 bits\nDMA Mask: \t 0x7fffffffffff\n"
            "Bus Location: \t %s\n",
            model, uuid, bus);
    if (minor >= 0)
        fprintf(f, "Device Minor: \t %d\n", minor);
    fprintf(f, "GPU Excluded:\t No\n");
    fclose(f);
}

static void layout(const char *name)
{
    snprintf(dev, sizeof dev, "%s/%s-dev", dt_test_tmpdir(), name);
    snprintf(proc, sizeof proc, "%s/%s-proc", dt_test_tmpdir(), name);
    ASSERT_EQ(mkdir(dev, 0755), 0);
    ASSERT_EQ(mkdir(proc, 0755), 0);
    /* the driver's other nodes are no GPUs */
    static const char *const others[] = {"nvidiactl",      "nvidia-uvm", "nvidia-uvm-tools",
                                         "nvidia-modeset", "nvidia0x",   NULL};
    for (int i = 0; others[i]; i++) {
        char path[700];
        snprintf(path, sizeof path, "%s/%s", dev, others[i]);
        FILE *f = fopen(path, "w");
        ASSERT_TRUE(f != NULL);
        fclose(f);
    }
}

static void expect(const char *visible, int count, const char *model)
{
    dt_hw_gpus g;
    dt_hw_count_gpus(dev, proc, visible, &g);
    if (g.count != count || strcmp(g.model, model))
        fprintf(stderr, "CUDA_VISIBLE_DEVICES=%s%s%s: got %d \"%s\"\n", visible ? "\"" : "",
                visible ? visible : "(unset)", visible ? "\"" : "", g.count, g.model);
    ASSERT_EQ(g.count, count);
    ASSERT_STREQ(g.model, model);
}

DT_TEST(core_hw_gpus_no_driver)
{
    dt_hw_gpus g;
    char missing[700];
    snprintf(missing, sizeof missing, "%s/none", dt_test_tmpdir());
    dt_hw_count_gpus(missing, missing, NULL, &g);
    ASSERT_EQ(g.count, 0);
    ASSERT_STREQ(g.model, "");
    layout("empty"); /* the driver's nodes, no GPU */
    expect(NULL, 0, "");
    expect("0", 0, "");
    expect("GPU-1234", 0, ""); /* an entry for a GPU that is not there is capped away */
}

DT_TEST(core_hw_gpus_visible_devices)
{
    layout("h200");
    /* minors not in bus order: CUDA numbers by bus (PCI_BUS_ID), as the index entries do */
    add_gpu(1, "0000:18:00.0", "NVIDIA H200", "GPU-aaaa1111-0000");
    add_gpu(0, "0000:2a:00.0", "NVIDIA H200", "GPU-bbbb2222-0000");
    add_gpu(2, "0000:3a:00.0", "NVIDIA H200", "GPU-cccc3333-0000");
    add_gpu(3, "0000:5d:00.0", "NVIDIA H200", "GPU-dddd4444-0000");
    expect(NULL, 4, "NVIDIA H200");
    expect("", 0, "");
    expect("-1", 0, "");
    expect("0", 1, "NVIDIA H200");
    expect("3,1", 2, "NVIDIA H200");
    expect(" 2 , 0 ", 2, "NVIDIA H200");
    expect("0,0,1", 2, "NVIDIA H200"); /* a GPU listed twice is one GPU */
    expect("0,1,2,3", 4, "NVIDIA H200");
    /* the list ends at its first invalid entry, as CUDA reads it */
    expect("1,4,2", 1, "NVIDIA H200");
    expect("0,-1,1", 1, "NVIDIA H200");
    expect("0,,1", 1, "NVIDIA H200");
    expect("0,x,1", 1, "NVIDIA H200");
    expect("x", 0, "");
    /* UUIDs, whole or a prefix, matched against the driver's */
    expect("GPU-cccc3333-0000", 1, "NVIDIA H200");
    expect("GPU-dddd,GPU-aaaa", 2, "NVIDIA H200");
    expect("GPU-aaaa,GPU-eeee,GPU-bbbb", 1, "NVIDIA H200");
    expect("GPU-aaaa,1", 2, "NVIDIA H200");
    /* MIG instances are not in the driver's files: counted, capped by the GPUs present */
    expect("MIG-1,MIG-2", 2, "NVIDIA H200");
    expect("MIG-1,MIG-2,MIG-3,MIG-4,MIG-5,MIG-6", 4, "NVIDIA H200");
}

DT_TEST(core_hw_gpus_models)
{
    layout("mixed");
    add_gpu(0, "0000:01:00.0", "NVIDIA A100-SXM4-80GB", "GPU-0");
    add_gpu(1, "0000:02:00.0", "Tesla T4", "GPU-1");
    add_gpu(2, "0000:03:00.0", "NVIDIA A100-SXM4-80GB", "GPU-2");
    expect(NULL, 3, "NVIDIA A100-SXM4-80GB, Tesla T4");
    expect("1", 1, "Tesla T4");
    expect("2,0", 2, "NVIDIA A100-SXM4-80GB");
    expect("MIG-x", 1, ""); /* of which model is not known on a mixed host */

    /* no /proc files (a container without them): counted, model unknown */
    layout("noproc");
    add_gpu(0, NULL, NULL, NULL);
    add_gpu(1, NULL, NULL, NULL);
    expect(NULL, 2, "");
    expect("1", 1, "");
    expect("GPU-abc", 1, ""); /* UUIDs cannot be checked without them */

    /* a driver that writes no "Device Minor:": paired with the nodes in bus order */
    layout("nominor");
    add_gpu(-1, "0000:01:00.0", "NVIDIA H100 80GB HBM3", "GPU-0");
    add_gpu(-2, "0000:02:00.0", "NVIDIA L4", "GPU-1");
    expect(NULL, 2, "NVIDIA H100 80GB HBM3, NVIDIA L4");
    expect("1", 1, "NVIDIA L4");
}
