#include "test.h"
#include "common/err.h"

TEST(err_str_names_every_code) {
    for (int c = 0; c < ERR_COUNT_; c++)
        CHECK(strcmp(err_str(-c), "unknown error") != 0);
    CHECK_EQ_STR(err_str(-ERR_NOMEM), "out of memory");
    CHECK_EQ_STR(err_str(ERR_COUNT_ + 5), "unknown error");
}
