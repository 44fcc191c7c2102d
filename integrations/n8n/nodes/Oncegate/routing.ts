/**
 * Which output a claim's answer leaves by. `POST /v1/claims` always answers
 * 200 with an explicit `claimed` boolean (a payload conflict is a 422 and
 * an error instead), so every answer has exactly one output and no IF node
 * can fall through on an empty branch.
 */

export const CLAIM_OUTPUTS = ['Claimed', 'Duplicate', 'In Flight', 'Ended'] as const;

export const enum ClaimOutput {
	Claimed = 0,
	Duplicate = 1,
	InFlight = 2,
	Ended = 3,
}

export interface ClaimAnswer {
	claimed?: boolean;
	duplicate?: boolean;
	state?: string;
	duplicate_of?: unknown;
	[field: string]: unknown;
}

/**
 * - claimed: yours, do the work;
 * - duplicate: already done (completed), or decided with its effects on
 *   their way (approved), or another key holds the business key: the stored
 *   result is in the item;
 * - in flight: another execution holds it, or it waits for a person;
 * - ended: failed for good or dead-lettered: an operator decides.
 */
export function claimOutput(answer: ClaimAnswer): ClaimOutput {
	if (answer.claimed === true) return ClaimOutput.Claimed;
	if (answer.duplicate === true || answer.duplicate_of) return ClaimOutput.Duplicate;
	switch (answer.state) {
		case 'completed':
		case 'approved':
			return ClaimOutput.Duplicate;
		case 'processing':
		case 'awaiting_human':
		case 'failed_retryable':
			return ClaimOutput.InFlight;
		default:
			return ClaimOutput.Ended;
	}
}
