// Expected outputs: GNU coreutils 9.1 `ls` run on a pseudo-terminal (`script -qc ls`) in the same folders.
import assert from "node:assert/strict";
import { columnsApply, inColumns } from "./ls_columns.ts";

Deno.test("lsdemo: as GNU ls 9.1 on an 80-column terminal", () => {
  assert.deepEqual(
    inColumns(
      "a_very_long_file_name_for_testing.csv\nalpha\nbeta\nchi\ndata.csv\ndelta\nepsilon\neta\ngamma\niota\nkappa\nlambda\nmu\nnotes.md\nnu\nomega\nomicron\nphi\npi\npsi\nrho\nsigma\nsub\ntau\ntheta\nupsilon\nxi\nzeta\n",
    ),
    "a_very_long_file_name_for_testing.csv  epsilon\tmu\t  pi\t theta\nalpha\t\t\t\t       eta\tnotes.md  psi\t upsilon\nbeta\t\t\t\t       gamma\tnu\t  rho\t xi\nchi\t\t\t\t       iota\tomega\t  sigma  zeta\ndata.csv\t\t\t       kappa\tomicron   sub\ndelta\t\t\t\t       lambda\tphi\t  tau\n",
  );
});

Deno.test("lscase2: as GNU ls 9.1 on an 80-column terminal", () => {
  assert.deepEqual(inColumns("projects\ntutorial_shell.ipynb\n"), "projects  tutorial_shell.ipynb\n");
});

Deno.test("lscase3: as GNU ls 9.1 on an 80-column terminal", () => {
  assert.deepEqual(
    inColumns(
      "f1\nf10\nf11\nf12\nf13\nf14\nf15\nf16\nf17\nf18\nf19\nf2\nf20\nf21\nf22\nf23\nf24\nf25\nf26\nf27\nf28\nf29\nf3\nf30\nf31\nf32\nf33\nf34\nf35\nf36\nf37\nf38\nf39\nf4\nf40\nf41\nf42\nf43\nf44\nf45\nf46\nf47\nf48\nf49\nf5\nf50\nf51\nf52\nf53\nf54\nf55\nf56\nf57\nf58\nf59\nf6\nf60\nf7\nf8\nf9\n",
    ),
    "f1   f13  f17  f20  f24  f28  f31  f35\tf39  f42  f46  f5   f53  f57  f60\nf10  f14  f18  f21  f25  f29  f32  f36\tf4   f43  f47  f50  f54  f58  f7\nf11  f15  f19  f22  f26  f3   f33  f37\tf40  f44  f48  f51  f55  f59  f8\nf12  f16  f2   f23  f27  f30  f34  f38\tf41  f45  f49  f52  f56  f6   f9\n",
  );
});

Deno.test("names GNU would quote, and empty listings, are left one per line", () => {
  assert.deepEqual(inColumns("a b\nc\n"), undefined);
  assert.deepEqual(inColumns("it's\n"), undefined);
  assert.deepEqual(inColumns(""), undefined);
});

Deno.test("long listings, recursion, one per line and several operands keep ls's own format", () => {
  for (const args of [["-l"], ["-la"], ["-R"], ["-1"], ["--recursive"], ["--help"], ["a", "b"]]) {
    assert.deepEqual(columnsApply(args), false, args.join(" "));
  }
  for (const args of [[], ["-F"], ["-a", "data"], ["-AF"], ["--all"], ["-t"]]) {
    assert.deepEqual(columnsApply(args), true, args.join(" "));
  }
});
