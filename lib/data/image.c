/* image.c - JPEG (libjpeg-turbo) and PNG (libpng) decoding into the model's channels, as
 * TensorFlow's decode_image(channels=...) converts them, with every declared size checked
 * before a pixel buffer is allocated.
 *
 * Why libpng rather than a lighter decoder: TF decodes PNG with libpng's own transforms
 * (strip_16, palette_to_rgb, tRNS_to_alpha, rgb_to_gray 0.299/0.587), so using the same calls
 * gives the same pixels, not merely close ones.
 *
 * Bombs. A PNG is deflate inside, and deflate inflates at most 1032:1, so a header declaring
 * more raw bytes than ~1032x the file can hold is a lie and is refused from the numbers alone.
 * A progressive JPEG can declare a huge image in a few bytes (EOB runs) and can make the
 * decoder loop over thousands of scans; the pixel ceiling bounds the first and a scan ceiling
 * (the one libjpeg-turbo's tools use, checked by the progress hook) the second. */
#include "data/data_internal.h"

#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h> /* before jpeglib.h, which uses FILE without including it */
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>

#include <jerror.h> /* after jpeglib.h: the JWRN_ codes */

dt_image_opts dt_image_opts_default(void)
{
    return (dt_image_opts){.height = 256,
                           .width = 256,
                           .channels = 3,
                           .interpolation = DT_INTERP_BILINEAR,
                           .dct_scaling = true};
}

const char *dt_image_kind(const uint8_t *p, size_t n)
{
    return dt__data_image_kind(p, n);
}

void dt_image_destroy(dt_image *im)
{
    if (!im)
        return;
    free(im->px);
    memset(im, 0, sizeof *im);
}

static dt_status check_dims(uint64_t w, uint64_t h, const char *kind, const char *what, dt_err *err)
{
    if (w == 0 || h == 0)
        return dt_err_set(err, DT_EINVAL, "%s: %s header declares an empty %llux%llu image", what,
                          kind, (unsigned long long)w, (unsigned long long)h);
    if (w > DT_MAX_IMAGE_DIM || h > DT_MAX_IMAGE_DIM || w * h > DT_MAX_IMAGE_PIXELS)
        return dt_err_set(err, DT_ETOOBIG,
                          "%s: %s header declares %llux%llu pixels, over the limit of %u pixels "
                          "(DT_MAX_IMAGE_PIXELS, sides up to %u): corrupt, a decompression bomb, "
                          "or an image to downscale before training",
                          what, kind, (unsigned long long)w, (unsigned long long)h,
                          DT_MAX_IMAGE_PIXELS, DT_MAX_IMAGE_DIM);
    return DT_OK;
}

/* ----------------------------------------------------------------------------------- JPEG -- */

typedef struct jpeg_fail {
    struct jpeg_error_mgr pub; /* first: libjpeg hands back this pointer */
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX + 64];
} jpeg_fail;

static void jpeg_on_error(j_common_ptr c)
{
    jpeg_fail *f = (jpeg_fail *)c->err;
    (*c->err->format_message)(c, f->msg);
    longjmp(f->jb, 1);
}

/* Warnings: libjpeg fills a truncated file with gray and only warns. TF (without
 * try_recover_truncated) and PIL refuse it, and so do we; other warnings (extraneous bytes
 * before a marker) are decoded through, as both of them do. */
static void jpeg_on_message(j_common_ptr c, int level)
{
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) {
        jpeg_fail *f = (jpeg_fail *)c->err;
        snprintf(f->msg, sizeof f->msg, "truncated: the data ends before the image does");
        longjmp(f->jb, 1);
    }
}

typedef struct jpeg_scans {
    struct jpeg_progress_mgr pub;
    jpeg_fail *fail;
} jpeg_scans;

static void jpeg_on_progress(j_common_ptr c)
{
    j_decompress_ptr d = (j_decompress_ptr)c;
    jpeg_scans *s = (jpeg_scans *)c->progress;
    if (d->input_scan_number > DT_MAX_JPEG_SCANS) {
        snprintf(s->fail->msg, sizeof s->fail->msg,
                 "more than %d progressive scans (DT_MAX_JPEG_SCANS): a decoding bomb",
                 DT_MAX_JPEG_SCANS);
        longjmp(s->fail->jb, 1);
    }
}

/* The largest 1/d (d = 8, 4, 2) that keeps the decoded image at least the target size:
 * libjpeg-turbo then skips most of the IDCT work. */
static int dct_denom(const dt_image_opts *o, unsigned w, unsigned h)
{
    if (!o->dct_scaling || o->height <= 0 || o->width <= 0)
        return 1;
    for (int d = 8; d > 1; d /= 2)
        if ((w + (unsigned)d - 1) / (unsigned)d >= (unsigned)o->width &&
            (h + (unsigned)d - 1) / (unsigned)d >= (unsigned)o->height)
            return d;
    return 1;
}

static dt_status decode_jpeg(const uint8_t *data, size_t len, const dt_image_opts *o,
                             const char *what, dt_image *out, dt_err *err)
{
    struct jpeg_decompress_struct cinfo;
    jpeg_fail fail;
    jpeg_scans scans;
    /* Written between setjmp and longjmp, read after: volatile. */
    uint8_t *volatile px = NULL;
    volatile dt_status st = DT_OK;
    memset(&cinfo, 0, sizeof cinfo);
    cinfo.err = jpeg_std_error(&fail.pub);
    fail.pub.error_exit = jpeg_on_error;
    fail.pub.emit_message = jpeg_on_message;
    fail.msg[0] = 0;
    if (setjmp(fail.jb)) {
        if (st == DT_OK)
            st = dt_err_set(err, DT_EINVAL, "%s: corrupt JPEG: %s", what, fail.msg);
        goto done;
    }
    jpeg_create_decompress(&cinfo);
    scans.pub.progress_monitor = jpeg_on_progress;
    scans.fail = &fail;
    cinfo.progress = &scans.pub;
    jpeg_mem_src(&cinfo, data, (unsigned long)len);
    jpeg_read_header(&cinfo, TRUE);
    out->src_w = (int)cinfo.image_width;
    out->src_h = (int)cinfo.image_height;
    snprintf(out->mode, sizeof out->mode, "%s",
             cinfo.num_components == 1   ? "L"
             : cinfo.num_components == 4 ? "CMYK"
                                         : "RGB");
    if ((st = check_dims(cinfo.image_width, cinfo.image_height, "JPEG", what, err)) != DT_OK)
        goto done;
    int want = o->channels;
    if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
        st = dt_err_set(err, DT_ENOTSUP,
                        "%s: CMYK JPEG is not supported; convert it to RGB (e.g. PIL's "
                        "convert(\"RGB\"))",
                        what);
        goto done;
    }
    if (want == 4 || want == 2) {
        st = dt_err_set(err, DT_EINVAL,
                        "%s: a JPEG has no alpha channel: color_mode \"rgba\" needs PNG files "
                        "(TF's decode_image refuses 4 channels for JPEG too); use \"rgb\"",
                        what);
        goto done;
    }
    if (want == 0)
        want = cinfo.num_components == 1 ? 1 : 3;
    cinfo.out_color_space = want == 1 ? JCS_GRAYSCALE : JCS_RGB;
    cinfo.dct_method = o->dct_fast ? JDCT_IFAST : JDCT_ISLOW;
    cinfo.do_fancy_upsampling = TRUE;
    cinfo.scale_num = 1;
    cinfo.scale_denom = (unsigned)dct_denom(o, cinfo.image_width, cinfo.image_height);
    jpeg_start_decompress(&cinfo);
    size_t row = (size_t)cinfo.output_width * (size_t)cinfo.output_components;
    px = malloc(row * cinfo.output_height);
    if (!px) {
        st = dt_err_set(err, DT_ENOMEM, "%s: cannot allocate %ux%u pixels", what,
                        cinfo.output_width, cinfo.output_height);
        goto done;
    }
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW r = px + row * cinfo.output_scanline;
        jpeg_read_scanlines(&cinfo, &r, 1);
    }
    jpeg_finish_decompress(&cinfo);
    out->px = px;
    out->w = (int)cinfo.output_width;
    out->h = (int)cinfo.output_height;
    out->c = cinfo.output_components;
    px = NULL;
done:
    jpeg_destroy_decompress(&cinfo);
    free(px);
    return st;
}

/* ------------------------------------------------------------------------------------ PNG -- */

typedef struct png_src {
    const uint8_t *p;
    size_t left;
    jmp_buf jb;
    char msg[256];
} png_src;

static void png_on_error(png_structp png, png_const_charp msg)
{
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    longjmp(s->jb, 1);
}

/* Warnings (an ancillary chunk with a bad CRC or an odd sRGB profile) do not change the
 * pixels: libpng drops the chunk and goes on, as TF does. */
static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg;
}

static void png_read_mem(png_structp png, png_bytep dst, size_t n)
{
    png_src *s = png_get_io_ptr(png);
    if (n > s->left)
        png_error(png, "truncated: the data ends before the image does");
    memcpy(dst, s->p, n);
    s->p += n;
    s->left -= n;
}

static dt_status decode_png(const uint8_t *data, size_t len, const dt_image_opts *o,
                            const char *what, dt_image *out, dt_err *err)
{
    png_src src = {.p = data, .left = len};
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    uint8_t *volatile px = NULL;
    png_bytep *volatile rows = NULL;
    volatile dt_status st = DT_OK;
    if (!png || !info) {
        st = dt_err_set(err, DT_ENOMEM, "%s: out of memory", what);
        goto done;
    }
    if (setjmp(src.jb)) {
        if (st == DT_OK)
            st = dt_err_set(err, DT_EINVAL, "%s: corrupt PNG: %s", what, src.msg);
        goto done;
    }
    png_set_user_limits(png, DT_MAX_IMAGE_DIM, DT_MAX_IMAGE_DIM);
    png_set_read_fn(png, &src, png_read_mem);
    png_read_info(png, info);
    png_uint_32 w, h;
    int depth, ctype, interlace;
    png_get_IHDR(png, info, &w, &h, &depth, &ctype, &interlace, NULL, NULL);
    out->src_w = (int)w;
    out->src_h = (int)h;
    {
        const char *m = ctype == PNG_COLOR_TYPE_GRAY         ? "L"
                        : ctype == PNG_COLOR_TYPE_GRAY_ALPHA ? "LA"
                        : ctype == PNG_COLOR_TYPE_PALETTE    ? "P"
                        : ctype == PNG_COLOR_TYPE_RGB_ALPHA  ? "RGBA"
                                                             : "RGB";
        if (depth == 8)
            snprintf(out->mode, sizeof out->mode, "%s", m);
        else
            snprintf(out->mode, sizeof out->mode, "%s;%d", m, depth);
    }
    if ((st = check_dims(w, h, "PNG", what, err)) != DT_OK)
        goto done;
    /* Raw (filtered) bytes the header declares, against what deflate can give from len. */
    uint64_t src_ch = png_get_channels(png, info);
    uint64_t raw = (uint64_t)h * ((uint64_t)w * src_ch * (uint64_t)depth / 8 + 2);
    if (raw > (uint64_t)len * 1032 + 65536) {
        st = dt_err_set(err, DT_ETOOBIG,
                        "%s: PNG header declares %ux%u pixels (%llu bytes), but %zu bytes of "
                        "deflate inflate to at most %llu: corrupt, or a decompression bomb",
                        what, (unsigned)w, (unsigned)h, (unsigned long long)raw, len,
                        (unsigned long long)len * 1032);
        goto done;
    }
    /* TF's CommonInitDecode, for 8-bit output. */
    bool has_trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
    int want = o->channels;
    if (want == 0)
        want = ctype == PNG_COLOR_TYPE_PALETTE ? (has_trns ? 4 : 3) : (int)src_ch;
    bool has_alpha = (ctype & PNG_COLOR_MASK_ALPHA) != 0;
    if (want % 2 == 0) {
        if (!has_alpha && has_trns)
            png_set_tRNS_to_alpha(png);
        else if (!has_alpha) /* opaque at any depth: TF's (1 << depth) - 1 gives a 1-bit
                                gray PNG an alpha of 1, as libpng applies it after expanding */
            png_set_add_alpha(png, 0xFFFF, PNG_FILLER_AFTER);
    } else if (has_alpha || has_trns) {
        png_set_strip_alpha(png);
    }
    if (depth > 8)
        png_set_strip_16(png); /* TF keeps the high byte (PIL's RGB;16B does the same) */
    png_set_packing(png);
    png_set_interlace_handling(png);
    if (ctype == PNG_COLOR_TYPE_PALETTE)
        png_set_palette_to_rgb(png);
    bool is_gray = (ctype & PNG_COLOR_MASK_COLOR) == 0;
    if (is_gray && depth < 8)
        png_set_expand_gray_1_2_4_to_8(png);
    if (want < 3 && !is_gray)
        png_set_rgb_to_gray(png, 1, 0.299, 0.587); /* ITU-R 601, as TF and JPEG */
    else if (want >= 3 && is_gray)
        png_set_gray_to_rgb(png);
    png_read_update_info(png, info);
    size_t rowbytes = png_get_rowbytes(png, info);
    int ch = png_get_channels(png, info);
    DT_ASSERT(ch, ==, want);
    DT_ASSERT(rowbytes, ==, (size_t)w * (size_t)ch);
    px = malloc(rowbytes * h);
    rows = malloc(h * sizeof(png_bytep));
    if (!px || !rows) {
        st = dt_err_set(err, DT_ENOMEM, "%s: cannot allocate %ux%u pixels", what, (unsigned)w,
                        (unsigned)h);
        goto done;
    }
    for (png_uint_32 y = 0; y < h; y++)
        rows[y] = px + rowbytes * y;
    png_read_image(png, rows);
    png_read_end(png, NULL); /* checks the CRCs of the chunks after the image data */
    out->px = px;
    out->w = (int)w;
    out->h = (int)h;
    out->c = ch;
    px = NULL;
done:
    png_destroy_read_struct(png ? &png : NULL, info ? &info : NULL, NULL);
    free(px);
    free(rows);
    return st;
}

dt_status dt_image_decode(const uint8_t *data, size_t len, const dt_image_opts *o, const char *what,
                          dt_image *out, dt_err *err)
{
    memset(out, 0, sizeof *out);
    const char *kind = dt_image_kind(data, len);
    if (!kind) {
        if (len >= 2 && data[0] == 'B' && data[1] == 'M')
            return dt_err_set(err, DT_ENOTSUP, "%s: BMP images are not supported; use PNG", what);
        if (len >= 4 && memcmp(data, "GIF8", 4) == 0)
            return dt_err_set(err, DT_ENOTSUP, "%s: GIF images are not supported; use PNG", what);
        return dt_err_set(err, DT_EINVAL,
                          "%s: not a JPEG or PNG image (%zu bytes, no JPEG or PNG signature)", what,
                          len);
    }
    if (o->channels < 0 || o->channels > 4)
        return dt_err_set(err, DT_EINVAL, "%s: %d channels asked (1, 3 or 4)", what, o->channels);
    if (kind[0] == 'J')
        return decode_jpeg(data, len, o, what, out, err);
    return decode_png(data, len, o, what, out, err);
}

/* ------------------------------------------------------------------ decode + crop + resize -- */

/* Keras's crop_to_aspect_ratio: the largest centred box of the target's aspect ratio
 * (int() truncations as in keras.src.backend.tensorflow.image.resize). */
static void crop_box(int h, int w, int th, int tw, int *y0, int *x0, int *ch, int *cw)
{
    int crop_h = (int)((double)w * th / tw), crop_w = (int)((double)h * tw / th);
    crop_h = crop_h < h ? crop_h : h;
    crop_w = crop_w < w ? crop_w : w;
    *ch = crop_h < 1 ? 1 : crop_h;
    *cw = crop_w < 1 ? 1 : crop_w;
    *y0 = (int)((double)(h - *ch) / 2);
    *x0 = (int)((double)(w - *cw) / 2);
}

/* Decodes and resizes into a float image of o's size (or the decoded size). *out is malloc'd
 * (oh * ow * c); the caller frees. */
static dt_status load_float(const uint8_t *data, size_t len, const dt_image_opts *o,
                            const char *what, float **out, dt_err *err)
{
    dt_image im;
    *out = NULL;
    DT_TRY(dt_image_decode(data, len, o, what, &im, err));
    int th = o->height > 0 ? o->height : im.h, tw = o->width > 0 ? o->width : im.w;
    int y0 = 0, x0 = 0, ch = im.h, cw = im.w;
    if (o->crop_to_aspect_ratio)
        crop_box(im.h, im.w, th, tw, &y0, &x0, &ch, &cw);
    dt_status st = DT_OK;
    float *res = malloc((size_t)th * (size_t)tw * (size_t)im.c * sizeof(float));
    if (!res) {
        dt_image_destroy(&im);
        return dt_err_set(err, DT_ENOMEM, "%s: out of memory", what);
    }
    dt__img_view v = {.u8 = im.px + ((size_t)y0 * (size_t)im.w + (size_t)x0) * (size_t)im.c,
                      .h = ch,
                      .w = cw,
                      .c = im.c,
                      .stride = (size_t)im.w * (size_t)im.c};
    st = dt__image_resize_view(&v, res, th, tw, o->interpolation, err);
    dt_image_destroy(&im);
    if (st != DT_OK) {
        free(res);
        return dt_err_prefix(err, "%s", what);
    }
    *out = res;
    return DT_OK;
}

static dt_status check_target(const dt_image_opts *o, const char *what, dt_err *err)
{
    if (o->height < 1 || o->width < 1 || o->channels < 1)
        return dt_err_set(err, DT_EINVAL, "%s: no target size and channels to load into", what);
    return DT_OK;
}

dt_status dt_image_load_u8(const uint8_t *data, size_t len, const dt_image_opts *o,
                           const char *what, uint8_t *out, dt_err *err)
{
    DT_TRY(check_target(o, what, err));
    if (o->interpolation == DT_INTERP_BILINEAR) {
        /* straight to uint8: no float image in between (the same values, see resize.c) */
        dt_image im;
        DT_TRY(dt_image_decode(data, len, o, what, &im, err));
        int y0 = 0, x0 = 0, ch = im.h, cw = im.w;
        if (o->crop_to_aspect_ratio)
            crop_box(im.h, im.w, o->height, o->width, &y0, &x0, &ch, &cw);
        dt__img_view v = {.u8 = im.px + ((size_t)y0 * (size_t)im.w + (size_t)x0) * (size_t)im.c,
                          .h = ch,
                          .w = cw,
                          .c = im.c,
                          .stride = (size_t)im.w * (size_t)im.c};
        dt_status st = dt__image_resize_bilinear_u8(&v, out, o->height, o->width, err);
        dt_image_destroy(&im);
        return st == DT_OK ? DT_OK : dt_err_prefix(err, "%s", what);
    }
    float *f;
    DT_TRY(load_float(data, len, o, what, &f, err));
    size_t n = (size_t)o->height * (size_t)o->width * (size_t)o->channels;
    for (size_t i = 0; i < n; i++) {
        float v = f[i] < 0 ? 0 : f[i] > 255 ? 255 : f[i];
        out[i] = (uint8_t)(v + 0.5f);
    }
    free(f);
    return DT_OK;
}

dt_status dt_image_load_f32(const uint8_t *data, size_t len, const dt_image_opts *o, float scale,
                            const char *what, float *out, dt_err *err)
{
    DT_TRY(check_target(o, what, err));
    float *f;
    DT_TRY(load_float(data, len, o, what, &f, err));
    size_t n = (size_t)o->height * (size_t)o->width * (size_t)o->channels;
    for (size_t i = 0; i < n; i++)
        out[i] = f[i] * scale;
    free(f);
    return DT_OK;
}
