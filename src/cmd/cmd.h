/* cmd.h: the subcommands of ./uvlm. Each takes the arguments after its name (argv[0] is the
 * subcommand name) and returns the process exit status: 0 ok, 1 failure, 2 bad usage/config.
 * Only main.c exits; a subcommand returns. */
#ifndef UVLM_CMD_H
#define UVLM_CMD_H

/* one declaration per subcommand */
int cmd_serve(int argc, char **argv); /* the HTTP server (serve.c); also what flags alone run */
int cmd_tokenize(int argc, char **argv);
int cmd_apply_template(int argc, char **argv);

int cmd_eval_logits(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_inspect(int argc, char **argv);

#endif
