/*
 * The product's error codes. See include/product/omnigate/app/errors.h.
 */
#include "omnigate/app/errors.h"

OG_APP_ERRCODES(OG_ERRCODE_DEFINE)
