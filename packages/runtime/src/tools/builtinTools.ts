import { runCommandTool } from './commandTool.ts';
import { fileTools } from './fileTools.ts';
import { httpFetchTool } from './httpTool.ts';
import type { Tool } from './tool.ts';

/** The built-in tools a pipeline can declare without code: file tools, `run_command` and `http_fetch`. */
export function builtinToolList(): Tool[] {
  return [...fileTools, runCommandTool, httpFetchTool];
}
