/*
 * The QR code image of WAHA's GET /api/{session}/auth/qr (sessions.c). Drawn the way WAHA's WEBJS
 * engine draws it (devlikeapro/waha src/core/engines/webjs/session.webjs.core.ts: QRCode.toDataURL(qr)
 * of the npm package qrcode, whose defaults are error correction level M, 4 pixels a module and a
 * quiet zone of 4 modules, black on white), with Debian's libraries rather than an encoder of our
 * own: libqrencode makes the symbol, libpng writes the image (8-bit grayscale; qrcode writes RGBA,
 * which no reader needs).
 */
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

#include <png.h>
#include <qrencode.h>

#include "sim.h"

/* qrcode's toDataURL defaults (its lib/renderer/utils.js: margin 4, scale 4). */
#define QR_SCALE  4
#define QR_MARGIN 4

/* The PNG being written, grown by doubling. */
typedef struct png_buf {
    unsigned char *data;
    size_t len, cap;
    bool failed;
} png_buf_t;

static void buf_write(png_structp png, png_bytep data, png_size_t n)
{
    png_buf_t *b = png_get_io_ptr(png);
    if (b->failed)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        unsigned char *grown = realloc(b->data, cap);
        if (grown == NULL) {
            b->failed = true;
            return;
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, n);
    b->len += n;
}

static void buf_flush(png_structp png) {}

/* Writes the image of `qr` into b; false on any libpng error (libpng reports them by longjmp, so
 * nothing here is allocated between setjmp and the end but by libpng itself, and `row` is set
 * before setjmp and only read after it). */
static bool write_png(const QRcode *qr, png_buf_t *b, png_bytep row)
{
    png_uint_32 side = (png_uint_32)(qr->width + 2 * QR_MARGIN) * QR_SCALE;
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png != NULL ? png_create_info_struct(png) : NULL;
    if (info == NULL) {
        png_destroy_write_struct(&png, NULL);
        return false;
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        return false;
    }
    png_set_write_fn(png, b, buf_write, buf_flush);
    png_set_IHDR(png, info, side, side, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (png_uint_32 y = 0; y < side; y++) {
        int my = (int)(y / QR_SCALE) - QR_MARGIN;
        for (png_uint_32 x = 0; x < side; x++) {
            int mx = (int)(x / QR_SCALE) - QR_MARGIN;
            bool dark = my >= 0 && my < qr->width && mx >= 0 && mx < qr->width &&
                        (qr->data[my * qr->width + mx] & 1) != 0;
            row[x] = dark ? 0x00 : 0xff;
        }
        png_write_row(png, row);
    }
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    return !b->failed;
}

unsigned char *sim_qr_png(const char *text, size_t *len)
{
    /* Version 0: the smallest symbol the text fits; case-sensitive 8-bit data, as qrcode encodes a
     * string of WhatsApp's base64 pieces. */
    QRcode *qr = QRcode_encodeString8bit(text, 0, QR_ECLEVEL_M);
    if (qr == NULL)
        return NULL;
    png_buf_t b = {0};
    png_bytep row = malloc((size_t)(qr->width + 2 * QR_MARGIN) * QR_SCALE);
    bool ok = row != NULL && write_png(qr, &b, row);
    free(row);
    QRcode_free(qr);
    if (!ok) {
        free(b.data);
        return NULL;
    }
    *len = b.len;
    return b.data;
}
