/* chat_json_test.c: JSON messages -> struct chat_messages. */
#include "test.h"

#include "api/chat_json.h"
#include "common/err.h"

#include <jansson.h>
#include <stdlib.h>

static int parse(const char *json, struct chat_messages *cm, char *why, size_t why_cap) {
    return chat_messages_parse(json, strlen(json), cm, why, why_cap);
}

TEST(chat_json_reads_roles_and_contents) {
    struct chat_messages cm;
    const char *json = "[{\"role\":\"system\",\"content\":\"S\"},"
                       " {\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},"
                       "                                 {\"type\":\"text\",\"text\":\"b\\u00e9\"}]},"
                       " {\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]}]";
    CHECK_EQ_INT(parse(json, &cm, NULL, 0), 0);
    CHECK_EQ_INT(cm.n, 3);
    CHECK_EQ_STR(cm.msgs[0].role, "system");
    CHECK_EQ_STR(cm.msgs[0].content, "S");
    CHECK_EQ_STR(cm.msgs[1].content, "a\nb\xc3\xa9"); /* text parts joined with "\n" */
    CHECK_EQ_STR(cm.msgs[2].role, "assistant");
    CHECK_EQ_STR(cm.msgs[2].content, "");
    chat_messages_free(&cm);
    CHECK_EQ_INT(cm.n, 0);
}

TEST(chat_json_empty_array_is_no_messages) {
    struct chat_messages cm;
    CHECK_EQ_INT(parse("[]", &cm, NULL, 0), 0);
    CHECK_EQ_INT(cm.n, 0);
    chat_messages_free(&cm);
}

TEST(chat_json_input_need_not_be_terminated) {
    struct chat_messages cm;
    const char buf[] = "[{\"role\":\"user\",\"content\":\"x\"}]GARBAGE";
    CHECK_EQ_INT(chat_messages_parse(buf, strlen(buf) - 7, &cm, NULL, 0), 0);
    CHECK_EQ_INT(cm.n, 1);
    chat_messages_free(&cm);
}

TEST(chat_json_says_what_is_wrong) {
    struct chat_messages cm;
    char why[128];
    CHECK_EQ_INT(parse("[{\"role\":", &cm, why, sizeof why), -ERR_FORMAT);
    CHECK(strstr(why, "bad JSON"));
    CHECK_EQ_INT(parse("{\"role\":\"user\"}", &cm, why, sizeof why), -ERR_FORMAT);
    CHECK(strstr(why, "not an array"));
    CHECK_EQ_INT(parse("[{\"role\":\"user\",\"content\":\"a\"}, {\"content\":\"b\"}]", &cm, why, sizeof why),
                 -ERR_FORMAT);
    CHECK_EQ_STR(why, "messages[1]: role is not a string");
    CHECK_EQ_INT(parse("[\"hello\"]", &cm, why, sizeof why), -ERR_FORMAT);
    CHECK_EQ_INT(parse("[{\"role\":\"user\",\"content\":42}]", &cm, why, sizeof why), -ERR_FORMAT);
    CHECK_EQ_INT(parse("[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]", &cm, why, sizeof why),
                 -ERR_FORMAT);
    CHECK_EQ_INT(parse("[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{}}]}]",
                       &cm, why, sizeof why),
                 -ERR_UNSUPPORTED);
    CHECK(strstr(why, "only text parts"));
    CHECK_EQ_INT(cm.n, 0); /* left empty on error */
}

TEST(chat_json_prompt_in_one_call) {
    json_t *msgs = json_loads("[{\"role\":\"user\",\"content\":\"Hi\"}]", 0, NULL);
    CHECK(msgs);
    char *prompt = NULL, why[128] = "";
    int len = chat_prompt_from_json(CHAT_CHATML, msgs, true, &prompt, why, sizeof why);
    CHECK_EQ_STR(prompt, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
    CHECK_EQ_INT(len, strlen(prompt));
    free(prompt);
    json_t *tool = json_loads("[{\"role\":\"tool\",\"content\":\"42\"}]", 0, NULL);
    CHECK_EQ_INT(chat_prompt_from_json(CHAT_GEMMA, tool, true, &prompt, why, sizeof why), -ERR_INVAL);
    CHECK(strstr(why, "gemma"));
    CHECK_EQ_INT(chat_prompt_from_json(CHAT_GEMMA, NULL, true, &prompt, why, sizeof why), -ERR_FORMAT);
    json_decref(tool);
    json_decref(msgs);
}
