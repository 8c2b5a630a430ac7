/**
 * Messages between the sidebar and the kernel over the `notebook_launcher` comm.
 * Mirrors notebook_launcher/comm_messages.py; change both together.
 */

export const COMM_TARGET = 'notebook_launcher';

export interface ISettings {
  num_processes: number | null;
  start_method: string;
  mixed_precision: string;
}

export interface IGpu {
  index: number;
  name: string;
  memory_mib: number | null;
}

export interface IInventory {
  cpu: { count: number };
  cuda: IGpu[];
  tpu: { cores: number; type: string | null };
  device: string;
  max_processes: number;
  default_processes: number;
}

export interface ILaunchInfo {
  id: string;
  ranks: number[];
  rank_status: { [rank: string]: string };
  status: string;
  elapsed: number;
  device: string;
  start_method: string;
}

/** Kernel → front end. */
export interface IStateMsg {
  type: 'state';
  inventory: IInventory;
  settings: ISettings;
  choices: { start_method: string[]; mixed_precision: string[] };
  launches: ILaunchInfo[];
}

export interface IReplyMsg {
  type: 'reply';
  request_id: string | null;
  ok: boolean;
  error: string | null;
  settings: ISettings;
}

export interface ILaunchMsg {
  type: 'launch';
  launch: ILaunchInfo;
}

export type KernelMsg = IStateMsg | IReplyMsg | ILaunchMsg;

/** Front end → kernel. */
export interface IGetStateMsg {
  type: 'get_state';
}

export interface ISetSettingsMsg {
  type: 'set_settings';
  request_id: string;
  settings: Partial<ISettings>;
}
