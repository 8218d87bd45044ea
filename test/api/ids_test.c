/* ids_test.c: random response ids (api/ids.c). */
#include "test.h"
#include "api/ids.h"

#include <ctype.h>

TEST(ids_are_prefixed_alphanumeric_and_distinct) {
    char ids[64][48];
    for (int i = 0; i < 64; i++) {
        api_random_id(ids[i], sizeof ids[i], "resp_", 24);
        CHECK_EQ_INT(strlen(ids[i]), 5 + 24);
        CHECK(strncmp(ids[i], "resp_", 5) == 0);
        for (const char *c = ids[i] + 5; *c; c++) CHECK(isalnum((unsigned char)*c));
        for (int j = 0; j < i; j++) CHECK(strcmp(ids[i], ids[j]) != 0);
    }
    char small[8];
    api_random_id(small, sizeof small, "chatcmpl-", 24); /* cut to fit, NUL-terminated */
    CHECK_EQ_INT(strlen(small), 7);
    CHECK(strncmp(small, "chatcmp", 7) == 0);
    api_random_id(small, sizeof small, "m_", 3);
    CHECK_EQ_INT(strlen(small), 5);
}
