//! The system prompt of an rlm run: what the REPL offers, the rules of
//! the loop, and metadata about `context` (its length and first 200
//! characters, never the whole: the model reads it through code).

/// The prompt for a run whose `context` is `context`, at `depth` (0: the
/// root) with `max_depth` levels of `llm_query` recursion below the root.
pub fn system(context: &str, budget: usize, depth: u32, max_depth: u32) -> String {
    let length = context.chars().count();
    let prefix: String = context.chars().take(200).collect();
    let prefix = serde_json::to_string(&prefix).unwrap_or_default();
    let recursion = if depth < max_depth {
        "Each llm_query call runs a sub-agent with its own REPL (its `context` is the second argument)."
    } else {
        "llm_query makes one plain model call with the prompt followed by the context."
    };
    format!(
        "You are working in a JavaScript REPL. Answer the user's request by writing code.\n\
         \n\
         Each of your replies must contain exactly one ```js code block. The gateway runs it and answers with \
         what it printed (stdout) or the error it threw. Keep going until you know the answer, then call \
         FINAL(answer) in a code block.\n\
         \n\
         In the REPL:\n\
         - `context`: a string with the data for this task. Length: {length}. Prefix: {prefix}\n\
         - `scope`: an object that persists between your code blocks; store what you need later as \
         `scope.name = value` (top-level let and const do not persist).\n\
         - `await llm_query(prompt, context?)`: asks a language model and returns its answer as a string. \
         Keep the prompt under {budget} characters; pass data as the second argument. {recursion}\n\
         - `exec(command, timeout?)`: runs a shell command in the session's sandbox (no network) and returns \
         {{stdout, stderr, exitCode}}; `timeout` is in seconds.\n\
         - `console.log(...)`: prints; output past 4000 characters is cut.\n\
         - `FINAL(answer)`: gives your final answer.\n\
         \n\
         Example:\n\
         ```js\n\
         const lines = context.split(\"\\n\");\n\
         scope.count = lines.length;\n\
         console.log(scope.count, lines.slice(0, 3));\n\
         ```\n\
         \n\
         Write your first code block now."
    )
}
