/* serving.c's request policy: the prompt-cache partition of a request. */
#include "api/serving.h"

#include "api/fake.h"
#include "test.h"

static uint64_t partition(const struct serving *srv, const char *header, const char *key, const char *salt) {
    struct fake_http f;
    fake_http_init(&f, "POST", "/completion", "{}");
    if (header) fake_http_header(&f, header, key);
    uint64_t p = serving_cache_partition(srv, &f.req, salt, salt ? strlen(salt) : 0);
    fake_http_free(&f);
    return p;
}

TEST(serving_cache_partition_by_key_and_salt) {
    struct config cfg = {0};
    struct serving srv = {.cfg = &cfg};
    /* without --api-key: one partition, whatever key a client sends; salts split it */
    CHECK_EQ_INT(partition(&srv, NULL, NULL, NULL), 0);
    CHECK_EQ_INT(partition(&srv, "X-Api-Key", "a", NULL), 0);
    uint64_t s1 = partition(&srv, NULL, NULL, "s1");
    CHECK(s1 != 0 && s1 != partition(&srv, NULL, NULL, "s2"));
    CHECK(s1 == partition(&srv, "Authorization", "Bearer a", "s1"));
    /* with keys: the key presented, either way, is the partition */
    cfg.api_key.n = 2;
    cfg.api_key.v[0] = "a";
    cfg.api_key.v[1] = "b";
    uint64_t a = partition(&srv, "Authorization", "Bearer a", NULL);
    CHECK(a != 0);
    CHECK(a == partition(&srv, "X-Api-Key", "a", NULL));
    CHECK(a == partition(&srv, "Authorization", "bearer   a", NULL));
    CHECK(a != partition(&srv, "X-Api-Key", "b", NULL));
    uint64_t as1 = partition(&srv, "X-Api-Key", "a", "s1");
    CHECK(as1 != a && as1 != s1 && as1 != partition(&srv, "X-Api-Key", "b", "s1"));
    CHECK(as1 == partition(&srv, "X-Api-Key", "a", "s1"));
    /* no field reads as another: key "ab" and no salt, key "a" and salt "b" */
    cfg.api_key.v[1] = "ab";
    CHECK(partition(&srv, "X-Api-Key", "ab", NULL) != partition(&srv, "X-Api-Key", "a", "b"));
}
