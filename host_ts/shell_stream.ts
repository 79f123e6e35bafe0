/**
 * Output that streams: just-bash hands a script's output back only when the script ends. This transform plugin
 * gives every command whose output would reach the script's own stdout or stderr a redirection to a sink path
 * (`>> STDOUT_SINK 2>> STDERR_SINK`, put before its own redirections, so `> file` and `2>&1` still win); the file
 * system (shell.ts's SinkFs) writes what reaches a sink to the cell at once.
 *
 * It walks into top-level loops, ifs, cases, groups and subshells, never into function bodies (a function may be
 * called inside a pipe or `$(...)`: its output comes when the call ends) nor into commands whose output is piped.
 * It rewrites only the script the kernel runs: nested runs (`$(...)`, `eval`, `bash -c`, `xargs`) pass through
 * plugins too, and their output belongs to their caller.
 */
import type {
  CommandNode,
  ScriptNode,
  StatementNode,
  TransformContext,
  TransformPlugin,
  TransformResult,
} from "just-bash";

export const STDOUT_SINK = "/dev/sandbox-stdout";
export const STDERR_SINK = "/dev/sandbox-stderr";
/** The command a top-level `ls` writing to the cell becomes: `ls`, its names laid out as on a terminal. */
export const TERMINAL_LS = "ls-on-terminal";

interface Redirection {
  type: "Redirection";
  fd: number | null;
  operator: string;
  target: unknown;
}
type WithRedirections = CommandNode & { redirections: Redirection[] };

const word = (value: string) => ({ type: "Word", parts: [{ type: "Literal", value }] });
const toSink = (fd: number | null, path: string): Redirection => ({
  type: "Redirection",
  fd,
  operator: ">>",
  target: word(path),
});
const isWord = (node: unknown, value: string) => {
  const parts = (node as { parts?: { type: string; value?: string }[] } | null)?.parts;
  return parts?.length === 1 && parts[0].type === "Literal" && parts[0].value === value;
};
const INPUT_OPERATORS = new Set(["<", "<<", "<<-", "<<<", "<&"]);
const redirectsOutput = (command: WithRedirections) =>
  command.redirections.some((r) => !INPUT_OPERATORS.has(r.operator));

/** The statement lists inside a compound command (none for other commands). */
function bodies(command: CommandNode): StatementNode[][] {
  const c = command as unknown as Record<string, unknown> & { type: string };
  switch (c.type) {
    case "For":
    case "CStyleFor":
    case "Group":
    case "Subshell":
      return [c.body as StatementNode[]];
    case "While":
    case "Until":
      return [c.condition as StatementNode[], c.body as StatementNode[]];
    case "If": {
      const clauses = c.clauses as { condition: StatementNode[]; body: StatementNode[] }[];
      return [...clauses.flatMap((k) => [k.condition, k.body]), ...(c.elseBody ? [c.elseBody as StatementNode[]] : [])];
    }
    case "Case":
      return (c.items as { body: StatementNode[] }[]).map((item) => item.body);
    default:
      return [];
  }
}

function streamStatements(list: StatementNode[]): void {
  for (const statement of list) {
    if (statement.background) continue;
    for (const pipeline of statement.pipelines) {
      pipeline.commands.forEach((command, i) => {
        const last = i === pipeline.commands.length - 1;
        const stderrPiped = pipeline.pipeStderr?.[i] === true;
        if (command.type === "FunctionDef") return;
        if (command.type === "SimpleCommand" && !command.name) return; // an assignment: nothing of its own to show
        const inner = bodies(command);
        const withRedirections = command as WithRedirections;
        if (inner.length && last && !stderrPiped && !redirectsOutput(withRedirections)) {
          return inner.forEach(streamStatements);
        }
        const toCell = last && !redirectsOutput(withRedirections);
        const sinks = [...(last ? [toSink(null, STDOUT_SINK)] : []), ...(stderrPiped ? [] : [toSink(2, STDERR_SINK)])];
        withRedirections.redirections?.unshift(...sinks);
        if (toCell && command.type === "SimpleCommand" && isWord(command.name, "ls")) {
          command.name = word(TERMINAL_LS) as typeof command.name; // the cell is ls's terminal: names in columns
        }
      });
    }
  }
}

export class StreamPlugin implements TransformPlugin {
  readonly name = "sandbox-stream";
  /** Set just before the kernel's own `exec`: the next script transformed is that one, and only it. */
  armed = false;

  transform(context: TransformContext): TransformResult {
    if (this.armed) {
      this.armed = false;
      streamStatements((context.ast as ScriptNode).statements);
    }
    return { ast: context.ast, metadata: {} };
  }
}
