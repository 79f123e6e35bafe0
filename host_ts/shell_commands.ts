/**
 * The sandbox shell's commands as files: each one the shell runs (just-bash's, curl, python3) is an entry in /usr/bin
 * and /bin of the guest's file system, and $PATH names those folders, so `which`, `type`, `command -v`, `ls /usr/bin`,
 * `find / -name ...` and Python's shutil.which agree on one set. just-bash runs a registered command found at either
 * path itself; the file only says what it is.
 */
import listed from "./shell_commands.json" with { type: "json" };

export const SHELL_COMMANDS: readonly string[] = listed.commands;
/** Also the guest's: checkpoint.py leaves these out of a checkpoint's files (a test holds its roots to them). */
export const COMMAND_FOLDERS: readonly string[] = listed.folders;
/** The guest's $PATH (Pyodide's own is "/"). */
export const COMMAND_PATH = COMMAND_FOLDERS.join(":");

/** What `cat /usr/bin/NAME` shows. */
export function commandFile(name: string): string {
  return "#!/bin/sh\n" +
    `# ${name}: a command of the sandbox's shell (just-bash), run inside the sandbox: no process starts.\n` +
    `# \`${name} --help\` says what it takes.\n`;
}

/** The part of Emscripten's FS this needs. */
export interface CommandFilesFS {
  mkdirTree(path: string): void;
  writeFile(path: string, data: string): void;
  chmod(path: string, mode: number): void;
}

/** Make the command files (read and run by all, written by none); before any guest code runs. */
export function installCommandFiles(fs: CommandFilesFS): void {
  for (const folder of COMMAND_FOLDERS) {
    fs.mkdirTree(folder);
    for (const name of SHELL_COMMANDS) {
      fs.writeFile(`${folder}/${name}`, commandFile(name));
      fs.chmod(`${folder}/${name}`, 0o555);
    }
    fs.chmod(folder, 0o555);
  }
}
